marked() {
  grep -lzxF -- "DESKCTL_SSH_DESKTOP=$1" /proc/[0-9]*/environ 2>/dev/null | sed -n 's,^/proc/\([0-9]*\)/environ$,\1,p'
}
others_kill() {
  [ -f "$1/users" ] || return 0
  while IFS= read -r u; do
    sudo -n -u "$u" /bin/sh -c 'grep -lzxF -- "DESKCTL_SSH_DESKTOP=$1" /proc/[0-9]*/environ 2>/dev/null |
      sed -n "s,^/proc/\([0-9]*\)/environ\$,\1,p" | xargs -r kill -"$2" 2>/dev/null' sh "$1" "$2" \
      </dev/null >/dev/null 2>&1
  done < "$1/users"
}
