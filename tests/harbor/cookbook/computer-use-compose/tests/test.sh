#!/bin/bash
# Reward 1 when the agent's container read the desktop sidecar's VNC banner ("RFB 003.008\n").
if grep -q '^RFB 003\.00[0-9]$' /app/banner.txt 2>/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "banner: $(head -c 40 /app/banner.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
