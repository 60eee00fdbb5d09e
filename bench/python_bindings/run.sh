#!/usr/bin/env bash
# bench/python_bindings/run.sh [BUILD_DIR]: why shmbox._core is written against the CPython C
# API and not pybind11 (issue 31). Builds pbpost.cpp, a pybind11 binding of the same two calls
# (post of a buffer, try_receive into bytes) over the C API, linked to the same copy of the
# library (the built shmbox._core), and times post + try_receive of 64 B through each, 5
# interleaved rounds of 100 000 in one process (compare.py). Needs pybind11-dev and a build
# with -Dpython=enabled (scripts/setup.sh). Not run by CI: a measurement, not a test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build}"
py=/usr/bin/python3
core="$(ls "$build"/python/shmbox/_core*.so)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
g++ -O2 -shared -fPIC -std=c++20 -I"$root/include" $("$py" -c 'import sysconfig; print("-I" + sysconfig.get_paths()["include"])') \
  "$here/pbpost.cpp" -o "$out/pbpost$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" \
  "$core" -Wl,-rpath,"$(dirname "$core")"
PYTHONPATH="$build/python:$out" "$py" "$here/compare.py"
