# Shared shell helpers for scripts/*: sourced, not run.
log() { printf '[deskctl] %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

# How long apt-get waits for another apt or dpkg process (unattended-upgrades, a second setup) to release its
# lock before giving up, in seconds.
apt_lock_timeout="${DESKCTL_APT_LOCK_TIMEOUT:-900}"
apt_updated=""
apt_get() { # apt_get ARGS... : apt-get, waiting (bounded, with a log line) while another process holds its locks
  local sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  local deadline=$((SECONDS + apt_lock_timeout)) waited="" out rc
  while :; do
    # DPkg::Lock::Timeout=0: a held lock fails at once, before anything is changed; we wait and say so
    rc=0; out=$(DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=0 "$@" 2>&1) || rc=$?
    if ((rc == 0)); then
      [[ -z "$waited" ]] || log "the apt lock is free; apt-get $1 went on"
      grep -E '^(W|E): ' <<<"$out" >&2 || true  # its warnings; the rest is progress
      printf '%s\n' "$out" | grep -vE '^(W|E): ' || true  # stdout, for callers that read or discard it
      return 0
    fi
    if ! grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock' <<<"$out"; then
      printf '%s\n' "$out" >&2; return "$rc"
    fi
    if ((SECONDS >= deadline)); then
      printf '%s\n' "$out" >&2
      log "another apt process held its lock for ${apt_lock_timeout}s; giving up (DESKCTL_APT_LOCK_TIMEOUT)"
      return "$rc"
    fi
    if [[ -z "$waited" ]]; then
      log "apt-get $1: another apt process holds the lock ($(grep -m1 -oE 'held by process [0-9]+[^)]*\)?' <<<"$out" \
          || echo 'its holder is not named')); waiting up to ${apt_lock_timeout}s"
      waited=1
    fi
    sleep 3
  done
}
apt_install() { # apt_install PKG... : install what is missing, running apt-get update once
  (($# == 0)) && return 0
  log "installing system packages: $*"
  if [[ -z "$apt_updated" ]]; then apt_get update -qq; apt_updated=1; fi
  apt_get install -y -qq --no-install-recommends "$@" >/dev/null
}
