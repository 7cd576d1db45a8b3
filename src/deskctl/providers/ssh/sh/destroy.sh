others_kill "$dir" TERM
pids=$(everything "$dir")
[ -n "$pids" ] && kill -TERM $pids 2>/dev/null
if command -v flock >/dev/null 2>&1 && [ -e "$dir/lock" ]; then
  flock -w 10 "$dir/lock" true 2>/dev/null
fi
n=0; while [ -n "$(everything "$dir")" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
pids=$(everything "$dir")
if [ -n "$pids" ]; then
  kill -KILL $pids 2>/dev/null
  n=0; while [ -n "$(everything "$dir")" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
fi
others_kill "$dir" KILL
rm -rf "$dir"
left=$(everything "$dir" | tr '\n' ' ')
if [ -n "$left" ] || [ -e "$dir" ]; then echo "left $left"; else echo gone; fi
