#!/bin/bash
# Reward 1 only for the answer written as root in the task's WORKDIR (/app), on a container with Docker's default
# capabilities (root may chown: deskctl's hardened profile drops that), the desktop's X socket at /tmp/.X11-unix/X1
# (where Harbor's computer-1 looks), no DISPLAY forced on the task's environment, and the task's TZ in effect.
cd /app
answer=$(cat /app/answer.txt 2>/dev/null)
socket=no; [ -S /tmp/.X11-unix/X1 ] && socket=yes
chown=no; touch /tmp/probe && chown nobody /tmp/probe 2>/dev/null && chown=yes
# apt drops to its _apt user with setgroups/setuid: what failed with "setgroups: Operation not permitted"
setuid=no; su -s /bin/sh nobody -c true 2>/dev/null && setuid=yes
zone=$(date +%Z)
echo "answer: $answer; cwd: $(pwd); socket: $socket; chown: $chown; setuid: $setuid; DISPLAY: ${DISPLAY:-unset}; zone: $zone"
if [ "$answer" = "harbor-stock root" ] && [ "$socket" = yes ] && [ "$chown" = yes ] && [ "$setuid" = yes ] && [ -z "${DISPLAY:-}" ] \
    && [ "$zone" = CST ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
