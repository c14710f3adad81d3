#!/usr/bin/env bash
# Make sure the services the tests use answer: PostgreSQL on loopback, and (through setup-sandbox.sh) the
# Docker engine without a bridge network, bubblewrap, and the sandbox image built offline; and Chromium for
# the headless browser tests. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "PostgreSQL is not answering on 127.0.0.1:5432; starting the local cluster"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432

# Headless Chromium for the browser test of /docs and /redoc (tests/e2e/test_docs_offline.py).
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing chromium (headless browser tests)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi

bash .ci/setup-sandbox.sh

# A compose CLI: tests/test_compose_gpu.py validates the compose files with it (and fails under CI without
# one). .ci/stack-test.sh installs the same when it is missing, but CI runs the suite beside it, not after.
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  echo "installing Debian's docker-compose (no compose plugin here)"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-compose
fi
