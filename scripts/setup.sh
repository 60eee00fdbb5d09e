#!/usr/bin/env bash
# scripts/setup.sh [BUILD_DIR] [meson options...]
# Installs what shmbox needs from Debian (only what is missing), then
# configures and builds. Used by demo.sh, test.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build g++ pkg-config python3 libboost-dev doctest-dev libcli11-dev nlohmann-json3-dev strace)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
    echo "setup: missing packages (${missing[*]}); run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build="${1:-build}"
shift || true
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$@" >/dev/null
elif [ $# -gt 0 ]; then
  meson configure "$build" "$@" >/dev/null
fi
# SHMBOX_TARGETS: build only these ninja targets (default: everything)
# shellcheck disable=SC2086
ninja -C "$build" ${SHMBOX_TARGETS:-} >/dev/null
