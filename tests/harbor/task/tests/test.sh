#!/bin/bash
# Reward 1 only for the token of the task's image and the size the run pinned (--ek geometry=800x600), read now
# from the live X server as well as from the answer, on a desktop with no network but loopback (the task's
# network_mode = "no-network").
expected="harbor-on-deskctl 800x600"
live=$(xdpyinfo | awk '/dimensions:/ {print $2}')
interfaces=$(awk -F: 'NR > 2 {gsub(/ /, "", $1); printf "%s ", $1}' /proc/net/dev)
if [ "$(cat /home/desk/answer.txt 2>/dev/null)" = "$expected" ] && [ "$live" = "800x600" ] \
    && [ "$interfaces" = "lo " ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "answer: $(cat /home/desk/answer.txt 2>&1); live screen: $live; interfaces: $interfaces"
  echo 0 > /logs/verifier/reward.txt
fi
