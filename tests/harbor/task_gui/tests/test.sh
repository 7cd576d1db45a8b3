#!/bin/bash
# Reward 1 only when the window "harbor-gui" is on display :1, reached with DISPLAY alone, the one X server of the
# container is at the size the run pinned (--ek geometry=800x600), and it is the task's own Xvfb.
live=$(DISPLAY=:1 xdpyinfo 2>&1 | awk '/dimensions:/ {print $2}')
window=$(DISPLAY=:1 xdotool search --name harbor-gui 2>/dev/null | head -1)
servers=$(ls /tmp/.X11-unix | tr '\n' ' ')
echo "live: $live; window: ${window:-none}; servers: $servers"
if [ "$live" = "800x600" ] && [ -n "$window" ] && [ "$servers" = "X1 " ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
