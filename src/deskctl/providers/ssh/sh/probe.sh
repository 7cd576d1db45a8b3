if p=$(command -v "$1" 2>/dev/null); then echo "xvfb $p"; else echo "xvfb-missing"; fi
if [ -n "$2" ]; then
  if p=$(command -v "$2" 2>/dev/null); then echo "wm $p"; else echo "wm-missing $2"; fi
fi
if [ -n "$3" ]; then
  # $3: the browser option, or "chromium chromium-browser google-chrome" (the first found)
  b=""; for c in $3; do b=$(command -v "$c" 2>/dev/null) && break; done
  if [ -n "$b" ]; then echo "browser $b"; else echo "browser-missing $3"; fi
fi
for t in mkfifo flock timeout grep sed od tar; do command -v "$t" >/dev/null 2>&1 || echo "tool-missing $t"; done
n=0; for s in /tmp/.X11-unix/X*; do [ -e "$s" ] && n=$((n+1)); done; echo "displays-in-use $n"
if [ -d /tmp/.X11-unix ]; then
  if [ -w /tmp/.X11-unix ]; then echo "socket-dir ok"; else echo "socket-dir not-writable"; fi
elif [ -w /tmp ]; then echo "socket-dir creatable"; else echo "socket-dir missing"; fi
echo "os $(uname -s)"
