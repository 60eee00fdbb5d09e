#!/usr/bin/env bash
# Quick start, command 1: build shmbox and run the demo (producers flooding a
# small box, drops counted, the owner killed and its box taken over).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh build
exec ./build/tools/shmbox-demo
