#!/bin/bash
# Not executable in git on purpose: Harbor runs `chmod +x` on it as root first, which deskctl must make work.
set -euo pipefail
size=$(xdpyinfo | awk '/dimensions:/ {print $2}')
printf '%s %s\n' "$(cat /opt/task/token)" "$size" > /home/desk/answer.txt
