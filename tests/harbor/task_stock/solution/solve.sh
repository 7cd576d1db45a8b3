#!/bin/bash
set -euo pipefail
printf '%s %s\n' "$(cat /app/token)" "$(id -un)" > /app/answer.txt
