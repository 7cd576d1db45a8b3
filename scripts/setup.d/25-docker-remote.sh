#!/usr/bin/env bash
# A second Docker engine, reached over TCP, for the tests of the docker provider on a remote engine (the display
# through the in-desktop agent, nothing shared through host directories). Idempotent and fast when it is there:
#   1. a bridge of its own (deskctl-br2, 172.30.99.1/24) so that it never touches docker0 or the first daemon's
#      iptables rules: the daemon runs with --iptables=false and publishes ports with the userland proxy;
#   2. dockerd on tcp://127.0.0.1:$DESKCTL_DOCKER2_PORT only (loopback, no TLS, no unix socket) with its own
#      --data-root, --exec-root, --pidfile, containerd namespace and cgroup parent; log in $DESKCTL_DOCKER2_LOG;
#   3. the offline base deskctl-base:bookworm copied from the first engine (docker save | docker load: there is
#      no registry here), then `deskctl image build --variant minimal` against it (a no-op when an image with the
#      same input hash is there);
#   4. its address written to /run/deskctl-docker2.env (DESKCTL_TEST_DOCKER2=tcp://127.0.0.1:PORT), which the
#      tests read (tests/_docker.py) and scripts/test exports.
# The first engine (20-docker.sh) is never stopped nor reconfigured. Stop this one with
# `kill $(cat /run/deskctl-docker2.pid)`.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh

[[ $(id -u) -eq 0 ]] || { log "25-docker-remote: not root; skipping (a second dockerd needs root)"; exit 0; }
have dockerd || apt_install docker.io
have ip || apt_install iproute2

port="${DESKCTL_DOCKER2_PORT:-23751}"
address="tcp://127.0.0.1:$port"
bridge=deskctl-br2
subnet_ip=172.30.99.1/24
data_root=/var/lib/deskctl-docker2
exec_root=/run/deskctl-docker2
pidfile=/run/deskctl-docker2.pid
envfile=/run/deskctl-docker2.env
logfile="${DESKCTL_DOCKER2_LOG:-/var/log/deskctl-dockerd2.log}"
docker2() { DOCKER_HOST="$address" docker "$@"; }

if ! docker2 info >/dev/null 2>&1; then
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    log "25-docker-remote: making the bridge $bridge ($subnet_ip)"
    ip link add "$bridge" type bridge
  fi
  ip addr show dev "$bridge" | grep -q "inet ${subnet_ip%/*}/" || ip addr add "$subnet_ip" dev "$bridge"
  ip link set "$bridge" up
  # a pid file left by a daemon that died makes dockerd refuse to start
  if [[ -f "$pidfile" ]] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then rm -f "$pidfile"; fi
  mkdir -p "$data_root" "$exec_root"
  log "25-docker-remote: starting a second dockerd on $address; log: $logfile"
  nohup dockerd --host "$address" --data-root "$data_root" --exec-root "$exec_root" --pidfile "$pidfile" \
      --bridge "$bridge" --iptables=false --ip6tables=false --ip-masq=false --userland-proxy=true \
      --containerd-namespace deskctl-docker2 --containerd-plugins-namespace deskctl-docker2-plugins \
      --cgroup-parent deskctl-docker2 --storage-driver "$(docker info -f '{{.Driver}}' 2>/dev/null || echo overlay2)" \
      >>"$logfile" 2>&1 </dev/null &
  pid=$!
  up=""
  for _ in $(seq 1 120); do
    docker2 info >/dev/null 2>&1 && { up=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if [[ -z "$up" ]]; then
    kill "$pid" 2>/dev/null || true
    log "25-docker-remote: the second dockerd did not come up; last lines of $logfile:"; tail -n 20 "$logfile" >&2
    exit 1
  fi
fi
printf 'DESKCTL_TEST_DOCKER2=%s\n' "$address" > "$envfile.new" && mv "$envfile.new" "$envfile"

base=deskctl-base:bookworm
want=$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null || true)
[[ -n "$want" ]] || { log "25-docker-remote: $base is not on the first engine (run 20-docker.sh first)"; exit 1; }
if [[ "$(docker2 image inspect -f '{{.Id}}' "$base" 2>/dev/null || true)" != "$want" ]]; then
  log "25-docker-remote: copying $base to the second engine"
  docker save "$base" | docker2 load >/dev/null
fi

export PATH="$PWD/.venv/bin:$PATH"
log "25-docker-remote: the minimal desktop image on the second engine (built only when its inputs changed)"
# this engine has no NAT (--iptables=false): the build's RUN steps reach the mirror on the host network
DOCKER_HOST="$address" deskctl image build --base "$base" --variant minimal --quiet --network host >/dev/null
DOCKER_HOST="$address" deskctl image prune >/dev/null 2>&1 || true
