set -u
trap '' PIPE HUP
base=${1:-$HOME/.cache/deskctl/ssh}; sid=$2; geom=$3; xvfb=$4; ttl=$5; mode=$6; wm=${7:-}
umask 077
fail() { echo "error $*"; exit 1; }
command -v "$xvfb" >/dev/null 2>&1 || fail "xvfb-missing $xvfb"
[ -z "$wm" ] || command -v "$wm" >/dev/null 2>&1 || fail "wm-missing $wm"
command -v mkfifo >/dev/null 2>&1 || fail "tool-missing mkfifo"
mkdir -p "$base" || fail "cannot create $base"
dir=$(cd "$base" && pwd -P)/$sid || fail "cannot enter $base"
mkdir "$dir" || fail "cannot create $dir"
bail() { rm -rf "$dir"; fail "$@"; }
IFS= read -r auth || bail "no cookie on stdin"
printf "$auth" > "$dir/Xauthority" || bail "cannot write $dir/Xauthority"
IFS= read -r meta || bail "no meta on stdin"
printf '%s\n' "$meta" > "$dir/meta.json"
echo "$mode" > "$dir/mode"
mkfifo "$dir/displayfd" || bail "cannot make a fifo in $dir"
if command -v flock >/dev/null 2>&1; then exec 9>"$dir/lock"; flock -n 9 || bail "lock busy"; fi
if [ "$ttl" -gt 0 ] && command -v timeout >/dev/null 2>&1; then
  set -- timeout -k 5 "$ttl" "$xvfb"
else
  set -- "$xvfb"
fi
"$@" -displayfd 3 -screen 0 "$geom" -auth "$dir/Xauthority" -nolisten tcp -noreset \
  3>"$dir/displayfd" </dev/null >"$dir/xvfb.log" 2>&1 &
xpid=$!
IFS= read -r display < "$dir/displayfd" || display=
rm -f "$dir/displayfd"
case $display in
  ''|*[!0-9]*)
    wait "$xpid"; st=$?
    sed -n '1,20s/^/log /p' "$dir/xvfb.log"
    bail "xvfb-failed $st";;
esac
wpid=
if [ -n "$wm" ]; then
  DISPLAY=":$display" XAUTHORITY="$dir/Xauthority" "$wm" </dev/null >"$dir/wm.log" 2>&1 &
  wpid=$!
fi
printf 'display=%s\nxvfb_pid=%s\nwatcher_pid=%s\nwm_pid=%s\n' "$display" "$xpid" "$$" "$wpid" > "$dir/state"
echo "ready $display $xpid $$ $dir"
rpid=
if [ "$mode" = detached ]; then
  exec </dev/null >>"$dir/watcher.log" 2>&1
else
  exec 4<&0
  (
    while IFS= read -r line; do
      case $line in detach) echo detached > "$dir/mode"; echo "ack detach"; exit 0;; esac
    done
    kill -TERM "$xpid" 2>/dev/null
  ) <&4 9>&- &
  rpid=$!
fi
trap 'kill -TERM "$xpid" 2>/dev/null' TERM INT
while :; do wait "$xpid"; st=$?; kill -0 "$xpid" 2>/dev/null || break; done
[ -n "$rpid" ] && kill "$rpid" 2>/dev/null
[ -n "$wpid" ] && kill "$wpid" 2>/dev/null && wait "$wpid"
# what exec started for this desktop (marked in its environment) ends with it
others_kill "$dir" TERM
pids=$(marked "$dir")
if [ -n "$pids" ]; then
  kill -TERM $pids 2>/dev/null
  n=0; while [ $n -lt 20 ] && [ -n "$(marked "$dir")" ]; do sleep 0.1; n=$((n+1)); done
  pids=$(marked "$dir"); [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
fi
others_kill "$dir" KILL
rm -rf "$dir"
echo "exited $st"
