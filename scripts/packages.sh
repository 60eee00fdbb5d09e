#!/usr/bin/env bash
# scripts/packages.sh WHO PACKAGE...   (sourced or run)
# Installs the Debian packages of the list that are missing, with apt-get
# (sudo if not root); says what it installs on stderr, prefixed by WHO.
# Used by setup.sh, fuzz.sh and .ci/run.
set -euo pipefail
install_missing() {
  local who="$1"
  shift
  local missing=() p sudo=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "$who: installing ${missing[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else
      echo "$who: missing packages (${missing[*]}); run as root: apt-get install -y ${missing[*]}" >&2
      return 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then install_missing "$@"; fi
