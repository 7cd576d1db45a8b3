dir=$1
[ -f "$dir/state" ] || { echo missing; exit 0; }
sed 's/^/state /' "$dir/state"
echo "mode $(cat "$dir/mode" 2>/dev/null)"
echo "auth $(od -An -v -tx1 "$dir/Xauthority" | tr -d ' \n')"
if [ -n "$(ours "$dir")" ]; then echo "alive yes"; else echo "alive no"; fi
