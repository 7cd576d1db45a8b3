#!/usr/bin/env bash
# The Docker engine and the deskctl desktop images the docker tests need. Idempotent and fast when all is there:
#   1. install the Debian package of the Docker engine when dockerd is missing;
#   2. start dockerd when `docker info` fails (CI starts with no daemon), logs in $DESKCTL_DOCKERD_LOG;
#   3. make the offline base image deskctl-base:bookworm with debootstrap + `docker import`, from the Debian
#      mirror this machine's apt already uses (no image registry is needed), unless one with the same inputs exists;
#   4. `deskctl image build --base deskctl-base:bookworm` (minimal, and browser unless DESKCTL_SKIP_BROWSER=1):
#      a no-op when an image with the same input hash exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh
sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"

have dockerd || apt_install docker.io
have debootstrap || apt_install debootstrap

if ! docker info >/dev/null 2>&1; then
  if [[ -n "${DOCKER_HOST:-}" ]]; then
    log "DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local daemon"; exit 1
  fi
  logfile="${DESKCTL_DOCKERD_LOG:-/var/log/deskctl-dockerd.log}"
  started=""
  if [[ -d /run/systemd/system ]] && $sudo systemctl start docker 2>/dev/null; then
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && { started=1; break; }; sleep 0.5; done
  fi
  # No systemd (containers, CI runners, sandboxes): dockerd in the background. Where the kernel refuses what a
  # default daemon needs, fall back to no iptables management, then to the vfs storage driver.
  for flags in "" "--iptables=false --ip6tables=false" "--iptables=false --ip6tables=false --storage-driver=vfs"; do
    [[ -n "$started" ]] && break
    log "starting dockerd ${flags:-(default flags)}; log: $logfile"
    # shellcheck disable=SC2086
    $sudo sh -c "nohup dockerd $flags >>'$logfile' 2>&1 </dev/null & echo \$! >/run/deskctl-dockerd.pid"
    pid=$($sudo cat /run/deskctl-dockerd.pid)
    for _ in $(seq 1 60); do
      docker info >/dev/null 2>&1 && { started=1; break; }
      $sudo kill -0 "$pid" 2>/dev/null || break  # it gave up: try the next flags
      sleep 0.5
    done
    if [[ -z "$started" ]]; then $sudo kill "$pid" 2>/dev/null || true; fi
  done
  if [[ -z "$started" ]]; then
    log "dockerd did not come up; last lines of $logfile:"; $sudo tail -n 20 "$logfile" >&2 || true; exit 1
  fi
fi

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
