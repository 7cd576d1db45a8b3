#!/usr/bin/env bash
# The Docker engine and the deskctl desktop images the docker tests need. Idempotent and fast when all is there:
#   1. install the Debian package of the Docker engine when dockerd is missing;
#   2. start dockerd when no engine answers (CI starts with no daemon), logs in $DESKCTL_DOCKERD_LOG; safe to run
#      twice at once and never a second daemon on a running one's data-root (scripts/lib/engine.sh);
#   3. make the offline base image deskctl-base:bookworm with debootstrap + `docker import`, from the Debian
#      mirror this machine's apt already uses (no image registry is needed), unless one with the same inputs exists;
#   4. `deskctl image build --base deskctl-base:bookworm` (minimal, and browser unless DESKCTL_SKIP_BROWSER=1):
#      a no-op when an image with the same input hash exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh
. scripts/lib/engine.sh
sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"

have dockerd || apt_install docker.io
have debootstrap || apt_install debootstrap

# The engine, started only when none answers (scripts/lib/engine.sh: one starter at a time, a bounded wait for a
# slow one, never a second daemon on the same data-root). DESKCTL_DOCKERD_SOCKET, _DATA_ROOT, _EXEC_ROOT, _PIDFILE,
# _FLAGS and _LOCK name another engine than the system's (for testing this script next to a running one).
sock="${DESKCTL_DOCKERD_SOCKET:-}"
data_root="${DESKCTL_DOCKERD_DATA_ROOT:-/var/lib/docker}"
exec_root="${DESKCTL_DOCKERD_EXEC_ROOT:-/var/run/docker}"
pidfile="${DESKCTL_DOCKERD_PIDFILE:-/var/run/docker.pid}"
lockfile="${DESKCTL_DOCKERD_LOCK:-/run/lock/deskctl-dockerd.lock}"
logfile="${DESKCTL_DOCKERD_LOG:-/var/log/deskctl-dockerd.log}"
wait="${DESKCTL_DOCKERD_WAIT:-180}"
if [[ -n "$sock" ]]; then export DOCKER_HOST="unix://$sock"
elif [[ -n "${DOCKER_HOST:-}" ]]; then
  engine_answers 30 && ok=1 || ok=""
  [[ -n "$ok" ]] || { log "DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local daemon"; exit 1; }
fi

start_dockerd() {
  local flags pid
  if [[ -z "$sock" && -d /run/systemd/system ]] && $sudo systemctl start docker 2>/dev/null; then
    if engine_answers 60; then record_started systemd docker; return 0; fi
  fi
  # No systemd (containers, CI runners, sandboxes): dockerd in a session of its own. Where the kernel refuses
  # what a default daemon needs, fall back to no iptables management, then to the vfs storage driver.
  for flags in "" "--iptables=false --ip6tables=false" "--iptables=false --ip6tables=false --storage-driver=vfs"; do
    log "starting dockerd ${flags:-(default flags)}; log: $logfile"
    # shellcheck disable=SC2086
    $sudo setsid nohup dockerd --data-root "$data_root" --exec-root "$exec_root" --pidfile "$pidfile" \
        ${sock:+--host "unix://$sock"} $flags ${DESKCTL_DOCKERD_FLAGS:-} >>"$logfile" 2>&1 </dev/null {ENGINE_LOCK_FD}>&- &
    pid=$!
    for _ in $(seq 1 "$wait"); do
      if docker info >/dev/null 2>&1; then
        pid=$($sudo cat "$pidfile" 2>/dev/null || echo "$pid")
        record_started dockerd "$pid"
        return 0
      fi
      $sudo kill -0 "$pid" 2>/dev/null || break  # it gave up: try the next flags
      sleep 1
    done
    # ours only ($!, never a pid read back from a shared file), and gone before the next try
    if $sudo kill -0 "$pid" 2>/dev/null; then
      $sudo kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 30); do $sudo kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    fi
  done
  log "dockerd did not come up; last lines of $logfile:"; $sudo tail -n 20 "$logfile" >&2 || true
  return 1
}
ensure_engine dockerd "$lockfile" "$pidfile" "$data_root" "$wait" start_dockerd || exit 1
[[ "${DESKCTL_DOCKER_ENGINE_ONLY:-0}" == "1" ]] && exit 0

# The offline base: debootstrap from the mirror apt uses here, keyed by a hash of its inputs.
base=deskctl-base:bookworm
mirror="${DESKCTL_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
fi
if [[ -z "$mirror" ]]; then
  mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
[[ -n "$mirror" ]] || { log "no Debian mirror found in apt sources; set DESKCTL_DEBIAN_MIRROR"; exit 1; }
inputs=$(printf 'debootstrap minbase bookworm %s v1' "$mirror" | sha256sum | cut -c1-16)
have_inputs=$(docker image inspect -f '{{ index .Config.Labels "deskctl.base.inputs" }}' "$base" 2>/dev/null || true)
if [[ "$have_inputs" != "$inputs" ]]; then
  root=$(mktemp -d /var/tmp/deskctl-base.XXXXXX)
  trap '$sudo rm -rf "$root"' EXIT
  log "debootstrap bookworm (minbase) from $mirror"
  $sudo debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  $sudo rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  log "importing it as $base"
  $sudo tar -C "$root" -c . | docker import --change "LABEL deskctl.base.inputs=$inputs" \
      --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
fi

export PATH="$PWD/.venv/bin:$PATH"
log "desktop images (built only when their inputs changed)"
build() { # the default bridge network first; the host network when the bridge cannot reach the mirror
  deskctl image build --base "$base" --variant "$1" --quiet >/dev/null \
    || deskctl image build --base "$base" --variant "$1" --quiet --network host >/dev/null
}
build minimal
if [[ "${DESKCTL_SKIP_BROWSER:-0}" != "1" ]]; then build browser; fi
deskctl image prune >/dev/null 2>&1 || true  # superseded builds (an older deskctl's files) take disk for nothing
