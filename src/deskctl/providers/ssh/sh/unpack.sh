LC_ALL=C; export LC_ALL
if [ -e "$1" ] && [ ! -d "$1" ]; then echo "$1 is a file, not a folder" >&2; exit 3; fi
if [ -d "$1" ]; then exec tar -xf - -C "$1"; fi
# a folder this copy makes goes again when the copy fails (a full disk, a stream cut short): no half tree stays
mkdir -p -- "$1" || exit 1
tar -xf - -C "$1" && exit 0
status=$?
rm -rf -- "$1"
exit "$status"
