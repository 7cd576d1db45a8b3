#!/bin/sh
# PID 1's child in a deskctl desktop container (docker-init is PID 1). Starts Xvfb on :N (DESKCTL_DISPLAY, default
# 0) at the pinned geometry, listening only on the unix socket /tmp/.X11-unix/XN (a directory the host bind-mounts) and
# requiring the MIT-MAGIC-COOKIE in $XAUTHORITY (written by the host, mounted read-only); then, when asked,
# a window manager and a browser. The container exits when Xvfb exits, or when the TTL runs out.
#   DESKCTL_GEOMETRY   WxHxDEPTH (required)
#   DESKCTL_DISPLAY    the display number (default 0; the provider sets DISPLAY to match)
#   DESKCTL_WM         1: start openbox
#   DESKCTL_START_URL  open this URL in Chromium (browser variant)
#   DESKCTL_WINDOW     WxH+X+Y of the browser window
#   DESKCTL_TTL        seconds after which the desktop stops itself (a backstop; the host reaper removes it)
#   DESKCTL_FBDIR      keep the framebuffer in DIR/Xvfb_screen0 (XWD), a host tmpfs the host captures from; no
#                      pointer is drawn into it (-nocursor): a capture shows what GetImage shows
#   DESKCTL_AGENT      1: start deskctl-agent (docs/agent.md) on 0.0.0.0:DESKCTL_AGENT_PORT (default 7390) once
#                      the display is up; it waits for its token in /run/deskctl/agent/token (the provider
#                      writes it after create). With no host-written $XAUTHORITY, a fresh cookie is made here.
set -eu
: "${DESKCTL_GEOMETRY:?DESKCTL_GEOMETRY is required}"
d=${DESKCTL_DISPLAY:-0}
if [ "${DESKCTL_SERVE_AGENT:-0}" = "1" ] && [ ! -s "$XAUTHORITY" ]; then
    # a remote engine shares no host folder: the cookie lives (and stays) in the container
    XAUTHORITY=/tmp/deskctl-Xauthority; export XAUTHORITY; : >"$XAUTHORITY"
    xauth -q -f "$XAUTHORITY" add ":$d" MIT-MAGIC-COOKIE-1 "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
fi
ready=/tmp/deskctl-xready
rm -f "$ready"; mkfifo "$ready"
Xvfb ":$d" -screen 0 "$DESKCTL_GEOMETRY" -nolisten tcp -nolisten local -auth "$XAUTHORITY" \
    -noreset -dpi 96 ${DESKCTL_FBDIR:+-fbdir "$DESKCTL_FBDIR" -nocursor} -displayfd 3 3>"$ready" &
xvfb=$!
# -displayfd writes the display number once the server accepts connections: no polling.
read -r _display <"$ready" || { wait "$xvfb"; exit $?; }
rm -f "$ready"
if [ "${DESKCTL_SERVE_AGENT:-0}" = "1" ]; then
    PYTHONPATH=/opt/deskctl-agent python3 -m deskctl.agent --listen 0.0.0.0 \
        --port "${DESKCTL_AGENT_PORT:-7390}" --display ":$d" --xauthority "$XAUTHORITY" &
fi
if [ -x /usr/libexec/at-spi-bus-launcher ] && command -v dbus-launch >/dev/null 2>&1; then
    # the accessibility bus, before any application: each finds it on the root window (AT_SPI_BUS) at its start
    DISPLAY=":$d" dbus-launch --exit-with-x11 /usr/libexec/at-spi-bus-launcher --launch-immediately \
        >/tmp/at-spi.log 2>&1 &
    i=0
    while [ "$i" -lt 200 ] && ! DISPLAY=":$d" xprop -root AT_SPI_BUS 2>/dev/null | grep -q '"'; do
        i=$((i + 1)); sleep 0.05
    done
fi
if [ "${DESKCTL_WM:-0}" = "1" ]; then
    openbox >/tmp/openbox.log 2>&1 &
fi
if [ -n "${DESKCTL_START_URL:-}" ]; then
    size="${DESKCTL_WINDOW:-}"
    # DevTools on the container's loopback only (verifiers expect 127.0.0.1:9222; deskctl reaches it by exec)
    set -- --remote-debugging-address=127.0.0.1 --remote-debugging-port=9222 \
        --no-first-run --no-default-browser-check --disable-dev-shm-usage --no-sandbox \
        --password-store=basic --user-data-dir=/home/desk/.chromium --force-renderer-accessibility
    if [ -n "$size" ]; then
        w=${size%%x*}; rest=${size#*x}; h=${rest%%[+-]*}; pos=${rest#"$h"}
        x=$(echo "$pos" | cut -d+ -f2); y=$(echo "$pos" | cut -d+ -f3)
        set -- "$@" --window-size="$w,$h" --window-position="${x:-0},${y:-0}"
    else
        set -- "$@" --start-maximized
    fi
    ACCESSIBILITY_ENABLED=1 chromium "$@" "$DESKCTL_START_URL" >/tmp/chromium.log 2>&1 &
fi
if [ -n "${DESKCTL_TTL:-}" ]; then
    ( sleep "$DESKCTL_TTL"; kill "$xvfb" ) >/dev/null 2>&1 &
fi
wait "$xvfb"
