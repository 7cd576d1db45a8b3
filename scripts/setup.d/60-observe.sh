#!/usr/bin/env bash
# Observation tests (tests/observe, the accessibility part of tests/conformance; docs/observation.md): the host
# Xvfb desktop's accessibility stack and the real applications driven through it. at-spi2-core (the accessibility
# bus and registry), dbus-x11 (dbus-launch starts the bus's D-Bus session with the desktop), python3-gi and
# gir1.2-atspi-2.0 (the system python3 walks the tree: deskctl runs its walk with /usr/bin/python3 inside the
# desktop), gir1.2-gtk-3.0 (the conformance suite's GTK dialog in python3), zenity (a GTK dialog to click through
# the tree), chromium (a page's form controls) and ffmpeg (a session's video: `--video`; ffprobe reads it back in
# tests/observe/test_video.py).
# Idempotent and fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh

need=()
[[ -x /usr/libexec/at-spi-bus-launcher ]] || need+=(at-spi2-core)
have dbus-launch || need+=(dbus-x11)
have xprop || need+=(x11-utils)
have zenity || need+=(zenity)
have chromium || need+=(chromium)
{ have ffmpeg && have ffprobe; } || need+=(ffmpeg)
/usr/bin/python3 -c "import gi; gi.require_version('Atspi', '2.0'); gi.require_version('Gtk', '3.0')" \
  >/dev/null 2>&1 || need+=(python3-gi gir1.2-atspi-2.0 gir1.2-gtk-3.0)
apt_install "${need[@]}"
