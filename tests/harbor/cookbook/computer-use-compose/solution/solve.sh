#!/bin/bash
# Read the RFB banner of the desktop's VNC server (bash's /dev/tcp: the base image has no netcat).
set -euo pipefail
for _ in $(seq 1 100); do
  if exec 3<>/dev/tcp/desktop/5900; then break; fi 2>/dev/null
  sleep 0.2
done
head -c 12 <&3 > /app/banner.txt
exec 3<&-
