#!/bin/bash
# As Harbor's computer-1 agent starts apps: DISPLAY=:1 and nothing else.
set -euo pipefail
DISPLAY=:1 nohup xmessage -name harbor-gui -title harbor-gui -geometry 300x100+40+40 "harbor gui task" \
    >/dev/null 2>&1 &
for _ in $(seq 100); do
  DISPLAY=:1 xdotool search --name harbor-gui >/dev/null 2>&1 && exit 0
  sleep 0.1
done
exit 1
