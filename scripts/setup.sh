#!/usr/bin/env bash
# scripts/setup.sh [BUILD_DIR] [meson options...]
# Installs what shmbox needs from Debian (only what is missing), then
# configures (tests, benchmarks, demo and bridge on, which a plain `meson
# setup` leaves off) and builds. Used by demo.sh, test.sh, soak.sh, tsan.sh,
# bench/run.sh and .ci/run. cmake writes
# the CMake package at configure time (cmake/meson.build); cmake and
# pkg-config build the example consumers in the 'package' test. python3-pytest
# runs the Python package's tests (suite 'python'); python3-venv,
# python3-setuptools and python3-wheel let them install it offline as the
# README's Install says (python -m venv, pip install); python3-dev and python3-mesonpy
# build its compiled module (-Dpython=enabled; patchelf, which python3-mesonpy
# only Recommends, reads the module's rpath when pip builds the wheel, and
# install_missing skips Recommends; python3-setuptools also gives a Python
# >= 3.12 the distutils Debian's meson asks for, and python3-typing-extensions
# lets a Python 3.9 run Debian's meson-python), python3-numpy and python3-zmq
# are the Python benchmark's baselines and examples. libnats-dev and
# libssl-dev build shmbox-bridge (docs/bridge.md: OpenSSL's Ed25519 for
# NKeys); nats-server runs its tests and bench, openssl makes their TLS
# certificates and python3-cryptography their NKeys. (`shmbox metrics
# --listen` needs no package: its HTTP server is tools/http_server.cpp.)
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=packages.sh
source scripts/packages.sh
install_missing setup meson ninja-build g++ pkg-config cmake python3 libboost-dev doctest-dev libcli11-dev nlohmann-json3-dev strace \
  python3-pytest python3-venv python3-setuptools python3-wheel python3-dev python3-mesonpy python3-typing-extensions patchelf python3-numpy python3-zmq \
  libnats-dev libssl-dev nats-server openssl python3-cryptography

build="${1:-build}"
shift || true
# A plain `meson setup` builds the library and the CLI only
# (meson_options.txt); the project's own builds build everything (the bridge
# when libnats-dev is there, as installed above). The caller's options come
# after these, so they win (e.g. -Dbench=false).
opts=(-Dtests=true -Dbench=true -Ddemo=true -Dbridge=auto -Dpython=enabled "$@")
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "${opts[@]}" >/dev/null
elif ! python3 scripts/build_options.py "$build" "${opts[@]}"; then
  # A build that differs from what is asked (configured by hand, or before an
  # option existed): reconfigured (--reconfigure: it also learns new options).
  meson setup --reconfigure "$build" "${opts[@]}" >/dev/null
fi
# SHMBOX_TARGETS: build only these ninja targets (default: everything)
# shellcheck disable=SC2086
ninja -C "$build" ${SHMBOX_TARGETS:-} >/dev/null
