#!/usr/bin/env bash
# PostgreSQL for the ledger and budget tests. No server is left running and no system cluster is touched: the
# tests start a private cluster of their own (initdb in a temp dir, loopback only, a free port) from Debian's
# binaries and remove it afterwards (tests/unit/_pg.py). This step only makes sure those binaries, the
# `postgres` user they run as when we are root, and the psycopg driver are there. Idempotent and fast.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/common.sh

compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || apt_install postgresql
if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
  log "the postgresql package did not create the postgres user"; exit 1
fi
if ! .venv/bin/python -c "import psycopg" 2>/dev/null; then
  log "installing psycopg into .venv"
  .venv/bin/pip install -q --disable-pip-version-check 'psycopg[binary]>=3.1'
fi
