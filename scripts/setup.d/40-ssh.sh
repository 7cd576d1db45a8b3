#!/usr/bin/env bash
# SSH provider tests: an OpenSSH server binary, the privilege-separation directory sshd needs, and a dedicated
# unprivileged login user (deskctl-ssh) that the loopback sshd started by tests/ssh fixtures logs into.
# The account gets no usable password ("*": key login only, not "locked", so sshd with UsePAM=no accepts keys).
# The host is also the harness tests' guest: xclip, x11-utils (xmessage, xwininfo), tar, and sudo with one rule
# that lets deskctl-ssh run commands as itself and as a second unprivileged user (deskctl-ssh-other) without a
# password (exec(user=...) is `sudo -n -u USER`); nothing else, and never as root.
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
have sudo || need+=(sudo)
have xclip || need+=(xclip)
have tar || need+=(tar)
{ have xmessage && have xwininfo; } || need+=(x11-utils)
apt_install "${need[@]}"
# Debian's openssh-server postinst may start the system sshd; deskctl's tests run their own on a loopback port.
mkdir -p /run/sshd && chmod 0755 /run/sshd
user=deskctl-ssh
if ! id "$user" >/dev/null 2>&1; then
  log "40-ssh: creating the test user $user"
  useradd --create-home --shell /bin/sh --comment "deskctl ssh provider tests" "$user"
fi
if [[ "$(getent shadow "$user" | cut -d: -f2)" != "*" ]]; then usermod -p '*' "$user"; fi
other=deskctl-ssh-other
if ! id "$other" >/dev/null 2>&1; then
  log "40-ssh: creating the second test user $other"
  useradd --create-home --shell /bin/sh --comment "deskctl ssh provider tests, exec as another user" "$other"
fi
rule="$user ALL=($user,$other) NOPASSWD: ALL"
if [[ "$(cat /etc/sudoers.d/deskctl-ssh 2>/dev/null)" != "$rule" ]]; then
  printf '%s\n' "$rule" > /etc/sudoers.d/deskctl-ssh.new
  chmod 0440 /etc/sudoers.d/deskctl-ssh.new
  visudo -cqf /etc/sudoers.d/deskctl-ssh.new
  mv /etc/sudoers.d/deskctl-ssh.new /etc/sudoers.d/deskctl-ssh
fi
