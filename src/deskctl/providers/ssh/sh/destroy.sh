# A Chromium of open_url (ssh/devtools.py): its zygotes and renderers rewrite their environment (no marker), so
# its process tree is found from the profile in its command line, and killed before the directory is removed
if [ -d "$dir/browser-profile" ]; then
  tree=$(grep -laF -- "user-data-dir=$dir/browser-profile" /proc/[0-9]*/cmdline 2>/dev/null |
    sed -n 's,^/proc/\([0-9]*\)/cmdline$,\1,p')
  add=$tree
  while [ -n "$add" ]; do
    add=$(for p in $add; do grep -l "^[0-9]* (.*) . $p " /proc/[0-9]*/stat 2>/dev/null; done |
      sed -n 's,^/proc/\([0-9]*\)/stat$,\1,p')
    tree="$tree $add"
  done
  # shellcheck disable=SC2086
  [ -n "${tree# }" ] && kill -KILL $tree 2>/dev/null
fi
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
