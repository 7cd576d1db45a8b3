LC_ALL=C; export LC_ALL
if [ -e "$1" ] && [ ! -d "$1" ]; then echo "$1 is a file, not a folder" >&2; exit 3; fi
mkdir -p -- "$1" && exec tar -xf - -C "$1"
