#!/bin/bash
# Reward 1 only when Chromium (started by the agent, DevTools on port 9222) shows the submitted form: the page's
# title in DevTools' /json/list and the title of Chromium's window on the X display :1.
expected="submitted:deskctl-on-harbor"
pages=$(curl -fsS --max-time 10 http://127.0.0.1:9222/json/list 2>&1)
window=$(DISPLAY=:1 xdotool search --name "^${expected} " getwindowname 2>/dev/null | head -1)
if grep -q "\"title\": *\"${expected}\"" <<<"$pages" && grep -q "file:///opt/task/form.html" <<<"$pages" \
    && [[ "$window" == "${expected} "* ]]; then
  echo "page and window: $window"
  echo 1 > /logs/verifier/reward.txt
else
  echo "pages: ${pages:0:600}"
  echo "window: ${window:-none}"
  echo 0 > /logs/verifier/reward.txt
fi
