base=${1:-$HOME/.cache/deskctl/ssh}
[ -d "$base" ] || exit 0
base=$(cd "$base" && pwd -P)
for d in "$base"/*; do
  [ -f "$d/meta.json" ] || continue
  echo "dir $d"
  echo "meta $(head -n 1 "$d/meta.json")"
  sed 's/^/state /' "$d/state" 2>/dev/null
  echo "mode $(cat "$d/mode" 2>/dev/null)"
  if [ -n "$(ours "$d")" ]; then echo "alive yes"; else echo "alive no"; fi
  echo end
done
