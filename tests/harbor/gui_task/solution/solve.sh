#!/bin/bash
# The oracle: what computer-1 does, without a model: Chromium on the display :1 with its DevTools port, the form
# filled and submitted with xdotool.
set -euo pipefail
export DISPLAY=:1
if [ ! -S /tmp/.X11-unix/X1 ]; then
  setsid nohup Xvfb :1 -screen 0 1024x900x24 >/tmp/oracle-xvfb.log 2>&1 </dev/null &
  for _ in $(seq 1 300); do [ -S /tmp/.X11-unix/X1 ] && break; sleep 0.1; done
fi
setsid nohup chromium --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --user-data-dir=/tmp/oracle-profile --remote-debugging-port=9222 --window-position=0,0 --window-size=1024,900 \
  file:///opt/task/form.html >/tmp/oracle-chromium.log 2>&1 </dev/null &
for _ in $(seq 1 300); do
  wid=$(xdotool search --name '^deskctl form' 2>/dev/null | head -1) && [ -n "$wid" ] && break
  sleep 0.2
done
# the page may still be rendering when its title appears: fill and submit, and again if it did not take
for _ in 1 2 3 4 5; do
  xdotool mousemove 512 400 click 1 key ctrl+a
  xdotool type --delay 20 deskctl-on-harbor
  xdotool key Return
  for _ in $(seq 1 20); do
    xdotool search --name '^submitted:deskctl-on-harbor' >/dev/null 2>&1 && exit 0
    sleep 0.1
  done
done
echo "the form was not submitted" >&2
exit 1
