#!/bin/sh
# tests/bridge/run_tests.sh SOURCE_ROOT [PYTEST ARGS...]: the meson test 'bridge'
# (tests/meson.build). Runs the NATS JetStream bridge's integration tests
# (tests/bridge, pytest; docs/bridge.md) against a nats-server it starts on
# loopback, with a python3 that has pytest: $SHMBOX_PYTHON, else the first
# python3 on PATH, else Debian's /usr/bin/python3 (a python3 from pyenv or a
# venv may lack it). Exit 77 (skipped) without pytest (apt-get install
# python3-pytest), without nats-server (apt-get install nats-server; or set
# SHMBOX_NATS_SERVER) or without the bridge (SHMBOX_BRIDGE).
# SHMBOX_BRIDGE, SHMBOX_CLI, SHMBOX_PY_DIR (the built package) and SHMBOX_HELPER come from meson's environment.
set -eu
root="$1"
shift
py=""
for candidate in "${SHMBOX_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$candidate" ] || continue
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import pytest' >/dev/null 2>&1; then
    py="$candidate"
    break
  fi
done
if [ -z "$py" ]; then
  echo "bridge: no python3 with pytest (apt-get install python3-pytest): skipped"
  exit 77
fi
nats="${SHMBOX_NATS_SERVER:-}"
if [ -z "$nats" ]; then
  nats="$(command -v nats-server 2>/dev/null || true)"
  [ -n "$nats" ] || { [ -x /usr/sbin/nats-server ] && nats=/usr/sbin/nats-server; } || true
fi
if [ -z "$nats" ] || [ ! -x "$nats" ]; then
  echo "bridge: no nats-server (apt-get install nats-server, or set SHMBOX_NATS_SERVER): skipped"
  exit 77
fi
export SHMBOX_NATS_SERVER="$nats"
bridge="${SHMBOX_BRIDGE:-$root/build/bridge/shmbox-bridge}"
if [ ! -x "$bridge" ]; then
  echo "bridge: $bridge not built (meson option -Dbridge, needs libnats-dev): skipped"
  exit 77
fi
export SHMBOX_SOURCE_ROOT="$root"
cd "$root/tests/bridge"
# No .pytest_cache nor __pycache__ in the source tree.
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -q -p no:cacheprovider "$@" .
