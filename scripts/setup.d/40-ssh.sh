#!/usr/bin/env bash
# SSH provider tests: an OpenSSH server binary, the privilege-separation directory sshd needs, and a dedicated
# unprivileged login user (deskctl-ssh) that the loopback sshd started by tests/ssh fixtures logs into.
# The account gets no usable password ("*": key login only, not "locked", so sshd with UsePAM=no accepts keys).
# Idempotent and fast when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh

[[ $(id -u) -eq 0 ]] || { log "40-ssh: not root; skipping (the ssh tests need root to run sshd)"; exit 0; }
need=()
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
have ssh || need+=(openssh-client)
have ssh-keygen || need+=(openssh-client)
have flock || need+=(util-linux)
apt_install "${need[@]}"
# Debian's openssh-server postinst may start the system sshd; deskctl's tests run their own on a loopback port.
mkdir -p /run/sshd && chmod 0755 /run/sshd
user=deskctl-ssh
if ! id "$user" >/dev/null 2>&1; then
  log "40-ssh: creating the test user $user"
  useradd --create-home --shell /bin/sh --comment "deskctl ssh provider tests" "$user"
fi
if [[ "$(getent shadow "$user" | cut -d: -f2)" != "*" ]]; then usermod -p '*' "$user"; fi
