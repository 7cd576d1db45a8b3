#!/usr/bin/env bash
# Harbor (the evaluation harness) for the end-to-end test of deskctl.integrations.harbor: a second virtualenv,
# .venv-harbor, because Harbor 0.26 needs Python >= 3.12 while deskctl supports 3.11. It holds harbor==0.26.0
# and this checkout (editable), so `.venv-harbor/bin/harbor run -e deskctl.integrations.harbor:DeskctlEnvironment`
# loads the code being tested. Cached: a stamp named by the hash of its inputs (the interpreter, the Harbor
# version, pyproject.toml) makes a second run cost nothing.
# The interpreter: $DESKCTL_HARBOR_PYTHON, else python3.12 / python3.13 on PATH, else pyenv's 3.12.x. Without one
# it exits 3 (scripts/test then leaves the Harbor tests out, saying so), or 1 when DESKCTL_REQUIRE_HARBOR=1 (CI).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh

harbor_version=0.26.0
venv=.venv-harbor

find_python() {
  local c
  if [[ -n "${DESKCTL_HARBOR_PYTHON:-}" ]]; then printf '%s\n' "$DESKCTL_HARBOR_PYTHON"; return; fi
  for c in python3.12 python3.13; do
    # pyenv's shims answer for versions that are not selected; only a Python that runs counts
    if have "$c" && "$c" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
      command -v "$c"; return
    fi
  done
  if have pyenv; then
    for c in "$(pyenv root)"/versions/3.12.*/bin/python3.12; do
      [[ -x "$c" ]] && { printf '%s\n' "$c"; return; }
    done
  fi
}
python=$(find_python || true)
if [[ -z "$python" || ! -x "$python" ]] \
    || ! "$python" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
  if [[ -n "$python" ]]; then log "50-harbor: $python is not a Python >= 3.12 that runs"; fi
  how="install one (for example \`pyenv install 3.12\`) or set DESKCTL_HARBOR_PYTHON=/path/to/python3.12"
  if [[ "${DESKCTL_REQUIRE_HARBOR:-0}" == "1" ]]; then
    log "50-harbor: Harbor $harbor_version needs Python >= 3.12 (Debian 12 has 3.11) and DESKCTL_REQUIRE_HARBOR=1: $how"
    exit 1
  fi
  log "50-harbor: Harbor $harbor_version needs Python >= 3.12 (Debian 12 has 3.11); its tests will be skipped: $how"
  exit 3  # scripts/test: no Harbor here, leave its tests out
fi

inputs=$( { "$python" -VV; printf 'harbor==%s\n' "$harbor_version"; cat pyproject.toml; } | sha256sum | cut -c1-16)
stamp="$venv/.deskctl-harbor-$inputs"
[[ -f "$stamp" ]] && exit 0

if [[ ! -x "$venv/bin/python" ]] || ! cmp -s <("$venv/bin/python" -VV 2>/dev/null) <("$python" -VV); then
  log "50-harbor: creating $venv with $python"
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi
log "50-harbor: installing harbor==$harbor_version and this checkout into $venv"
"$venv/bin/pip" install -q --disable-pip-version-check "harbor==$harbor_version" -e .
rm -f "$venv"/.deskctl-harbor-*; touch "$stamp"
