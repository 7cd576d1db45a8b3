# Shared shell helpers for scripts/*: sourced, not run.
log() { printf '[deskctl] %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
apt_updated=""
apt_install() { # apt_install PKG... : install what is missing, running apt-get update once
  (($# == 0)) && return 0
  local sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  log "installing system packages: $*"
  if [[ -z "$apt_updated" ]]; then $sudo apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
