#!/usr/bin/env bash
# A second Docker engine, reached over TCP, for the tests of the docker provider on a remote engine (the display
# through the in-desktop agent, nothing shared through host directories). Idempotent and fast when it is there:
#   1. a bridge of its own (deskctl-br2, 172.30.99.1/24) so that it never touches docker0 or the first daemon's
#      iptables rules: the daemon runs with --iptables=false and publishes ports with the userland proxy;
#   2. dockerd on tcp://127.0.0.1:$DESKCTL_DOCKER2_PORT only (loopback, no unix socket) with TLS and client
#      certificates (--tlsverify; a CA and both pairs made afresh at each start, in the root-only
#      /run/deskctl-docker2-tls: only root can use the engine), its own --data-root, --exec-root, --pidfile,
#      containerd namespace and cgroup parent, started safely (scripts/lib/engine.sh); log in $DESKCTL_DOCKER2_LOG;
#   3. the offline base deskctl-base:bookworm copied from the first engine (docker save | docker load: there is
#      no registry here), then the minimal and browser desktop images (browser: not with DESKCTL_SKIP_BROWSER=1):
#      each copied from the first engine when it has the same input hash, else `deskctl image build` against the
#      base (a no-op when an image with the same input hash is there);
#   4. its address and client certificates written to /run/deskctl-docker2.env (DESKCTL_TEST_DOCKER2=
#      tcp://127.0.0.1:PORT, DESKCTL_TEST_DOCKER2_CERT_PATH=DIR), which the tests read
#      (tests/docker_provider/_docker_target.py: DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH=DIR for that engine).
# The first engine (20-docker.sh) is never stopped nor reconfigured. scripts/test stops this one at its end when it
# started it (unless DESKCTL_KEEP_ENGINES=1); by hand: `kill $(cat /run/deskctl-docker2.pid)`. To use it yourself:
# `DOCKER_HOST=tcp://127.0.0.1:23751 DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=/run/deskctl-docker2-tls/client docker ...`
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh
. scripts/lib/engine.sh

[[ $(id -u) -eq 0 ]] || { log "25-docker-remote: not root; skipping (a second dockerd needs root)"; exit 0; }
have dockerd || apt_install docker.io
have ip || apt_install iproute2

port="${DESKCTL_DOCKER2_PORT:-23751}"
address="tcp://127.0.0.1:$port"
# DESKCTL_DOCKER2_NAME, _BRIDGE and _SUBNET name another engine than the tests' (for testing this script next to a
# running one): its data and exec roots, pid, lock and env files and its TLS folder all follow the name.
name="${DESKCTL_DOCKER2_NAME:-deskctl-docker2}"
bridge="${DESKCTL_DOCKER2_BRIDGE:-deskctl-br2}"
subnet_ip="${DESKCTL_DOCKER2_SUBNET:-172.30.99.1/24}"
data_root=/var/lib/$name
exec_root=/run/$name
pidfile=/run/$name.pid
envfile=/run/$name.env
lockfile=/run/lock/$name.lock
tls=/run/$name-tls  # root-only: ca.pem and the server's pair; client/ holds the client's (DOCKER_CERT_PATH)
logfile="${DESKCTL_DOCKER2_LOG:-/var/log/$name.log}"
wait="${DESKCTL_DOCKERD_WAIT:-180}"
export DOCKER_HOST="$address" DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH="$tls/client"
docker1() { env -u DOCKER_HOST -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH docker "$@"; }

# A CA, the server's certificate (127.0.0.1) and a client's, made afresh for each start of the engine: only root
# can read them, so only root can use the engine (a plain TCP port would let any local account, the ssh tests'
# user included, use it: root on this machine).
make_certs() {
  have openssl || apt_install openssl
  rm -rf "$tls"; (umask 077; mkdir -p "$tls/client")
  local days=7 subj="/CN=deskctl-docker2"
  (
    cd "$tls"; umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days "$days" -subj "$subj CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "$subj server" -keyout server-key.pem -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" \
        -extfile server.ext -out server-cert.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "$subj client" -keyout client/key.pem -out client.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" \
        -extfile client.ext -out client/cert.pem 2>/dev/null
    cp ca.pem client/ca.pem
    rm -f ca-key.pem ./*.csr ./*.ext ./*.srl  # nothing can be signed by this CA any more
  )
}

start_docker2() {
  local pid
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    log "25-docker-remote: making the bridge $bridge ($subnet_ip)"
    ip link add "$bridge" type bridge
    record_started bridge "$bridge"
  fi
  ip addr show dev "$bridge" | grep -q "inet ${subnet_ip%/*}/" || ip addr add "$subnet_ip" dev "$bridge"
  ip link set "$bridge" up
  # a pid file left by a daemon that died makes dockerd refuse to start (ensure_engine checked it names no live one)
  rm -f "$pidfile"
  make_certs
  mkdir -p "$data_root" "$exec_root"
  log "25-docker-remote: starting a second dockerd on $address (TLS, client certificates in $tls/client); log: $logfile"
  setsid nohup dockerd --host "$address" --tlsverify --tlscacert "$tls/ca.pem" --tlscert "$tls/server-cert.pem" \
      --tlskey "$tls/server-key.pem" --data-root "$data_root" --exec-root "$exec_root" --pidfile "$pidfile" \
      --bridge "$bridge" --iptables=false --ip6tables=false --ip-masq=false --userland-proxy=true \
      --containerd-namespace "$name" --containerd-plugins-namespace "$name-plugins" \
      --cgroup-parent "$name" --storage-driver "$(docker1 info -f '{{.Driver}}' 2>/dev/null || echo overlay2)" \
      >>"$logfile" 2>&1 </dev/null {ENGINE_LOCK_FD}>&- &
  pid=$!
  for _ in $(seq 1 "$wait"); do
    if docker info >/dev/null 2>&1; then
      record_started dockerd "$pid"; record_started path "$tls"; record_started path "$envfile"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  kill "$pid" 2>/dev/null || true
  log "25-docker-remote: the second dockerd did not come up; last lines of $logfile:"; tail -n 20 "$logfile" >&2
  return 1
}

cert_path="$tls/client"
if [[ ! -r "$tls/client/cert.pem" ]] && env -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH timeout 30 docker info >/dev/null 2>&1
then
  # started by an older setup, without TLS: not ours to stop; used as it is, and said loudly
  log "25-docker-remote: WARNING: the engine at $address answers without TLS: any local account can use it (root"
  log "25-docker-remote: on this machine). Stop it (kill \$(cat $pidfile)) so that the next run starts it with TLS."
  unset DOCKER_TLS_VERIFY DOCKER_CERT_PATH; cert_path=""
else
  ensure_engine 25-docker-remote "$lockfile" "$pidfile" "$data_root" "$wait" start_docker2 || exit 1
fi
# what the tests read (tests/docker_provider/_docker_target.py; scripts/test exports it)
{ printf 'DESKCTL_TEST_DOCKER2=%s\n' "$address"
  [[ -z "$cert_path" ]] || printf 'DESKCTL_TEST_DOCKER2_CERT_PATH=%s\n' "$cert_path"
} > "$envfile.new" && mv "$envfile.new" "$envfile"
[[ "${DESKCTL_DOCKER_ENGINE_ONLY:-0}" == "1" ]] && exit 0

base=deskctl-base:bookworm
want=$(docker1 image inspect -f '{{.Id}}' "$base" 2>/dev/null || true)
[[ -n "$want" ]] || { log "25-docker-remote: $base is not on the first engine (run 20-docker.sh first)"; exit 1; }
if [[ "$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null || true)" != "$want" ]]; then
  log "25-docker-remote: copying $base to the second engine"
  docker1 save "$base" | docker load >/dev/null
fi

export PATH="$PWD/.venv/bin:$PATH"
# The desktop images: minimal, and the one with Chromium (the docker-remote conformance target's browser tests)
# unless DESKCTL_SKIP_BROWSER=1. Each is the first engine's (20-docker.sh built it) copied when that engine has the
# one of these inputs (the same tag: the base came with its id), which needs no mirror; else built here. Either way
# nothing is done when the tag is here.
variants=(minimal)
[[ "${DESKCTL_SKIP_BROWSER:-0}" == "1" ]] || variants+=(browser)
for variant in "${variants[@]}"; do
  tag=$(python -c 'import sys; from deskctl.providers.docker.images import image_tag
print(image_tag(sys.argv[1], sys.argv[2], sys.argv[3]))' "$variant" "$base" "$want")
  if ! docker image inspect "$tag" >/dev/null 2>&1 && docker1 image inspect "$tag" >/dev/null 2>&1; then
    log "25-docker-remote: copying $tag to the second engine"
    docker1 save "$tag" | docker load >/dev/null
  fi
  log "25-docker-remote: the $variant desktop image on the second engine (built only when its inputs changed)"
  # this engine has no NAT (--iptables=false): the build's RUN steps reach the mirror on the host network
  deskctl image build --base "$base" --variant "$variant" --quiet --network host >/dev/null
done
deskctl image prune >/dev/null 2>&1 || true
