#!/usr/bin/env bash
# Docker Compose v2 (the `docker compose` CLI plugin) for Harbor's compose tasks and Harbor's own docker environment
# (which runs every task through `docker compose`). Debian 12's `docker-compose` package is the old v1 (Python);
# Debian 13's `docker-compose` package ships the v2 plugin (/usr/libexec/docker/cli-plugins/docker-compose, a Go
# binary that needs only libc6 >= 2.34). This step fetches that one package from the Debian mirror this machine's
# apt already uses, through a private apt state (its own sources list, lists and cache in a temp dir: the system's
# sources and package lists are left as they are), then installs the .deb with apt-get.
# Idempotent: nothing happens when `docker compose version` already reports v2.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh
sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"

version=$(docker compose version --short 2>/dev/null || true)
if [[ "$version" =~ ^v?2\. ]]; then exit 0; fi

mirror="${DESKCTL_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
fi
if [[ -z "$mirror" ]]; then
  mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
[[ -n "$mirror" ]] || { log "22-compose: no Debian mirror found in apt sources; set DESKCTL_DEBIAN_MIRROR"; exit 1; }
suite="${DESKCTL_COMPOSE_SUITE:-trixie}"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

state=$(mktemp -d /tmp/deskctl-compose-apt.XXXXXX)
trap 'rm -rf "$state"' EXIT
chmod 755 "$state"  # apt's _apt user downloads into it
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/debs"
printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$mirror" "$suite" >"$state/sources.list"
apt_private=(-o "Dir::Etc::sourcelist=$state/sources.list" -o "Dir::Etc::sourceparts=-"
             -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o "APT::Sandbox::User=root")

log "22-compose: fetching Debian $suite's docker-compose (Compose v2) from $mirror"
apt-get "${apt_private[@]}" update -qq
(cd "$state/debs" && apt-get "${apt_private[@]}" download docker-compose >/dev/null)
deb=$(ls "$state"/debs/docker-compose_*.deb)
contents=$(dpkg-deb -c "$deb")
grep -q 'usr/libexec/docker/cli-plugins/docker-compose$' <<<"$contents" \
  || { log "22-compose: $deb does not hold the Compose v2 CLI plugin"; exit 1; }
# the system's own sources resolve its dependencies (libc6); another apt may hold the dpkg lock: wait for it
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  -o DPkg::Lock::Timeout=900 "$deb" >/dev/null
version=$(docker compose version --short 2>/dev/null || true)
[[ "$version" =~ ^v?2\. ]] || { log "22-compose: docker compose still does not answer after the install"; exit 1; }
log "22-compose: docker compose $version"
