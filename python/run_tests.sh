#!/bin/sh
# python/run_tests.sh SOURCE_ROOT: the meson test 'python' (python/meson.build).
# Runs the package's pytest suite (python/tests) with a python3 that has
# pytest: $SHMBOX_PYTHON, else the first python3 on PATH, else Debian's
# /usr/bin/python3 (a python3 from pyenv or a venv may lack it). Exit 77
# (skipped) when none has it: apt-get install python3-pytest.
# SHMBOX_PY_DIR (the package as built), SHMBOX_PYTHON, SHMBOX_CLI and
# SHMBOX_HELPER come from meson's environment.
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
  echo "python: no python3 with pytest (apt-get install python3-pytest): skipped"
  exit 77
fi
# Not from python/: there, python/shmbox (the sources, without the compiled
# module) would be imported by `python -c` children instead of the built
# package (the current directory comes first on sys.path).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
# No .pytest_cache nor __pycache__ in the source tree.
export PYTHONDONTWRITEBYTECODE=1
"$py" -m pytest -q -p no:cacheprovider --rootdir "$root/python" "$@" "$root/python/tests"
