#!/usr/bin/env bash
# Runs on a worker (tpu/setup.sh calls it there): prints the path of a Python 3.11 or newer with
# venv support, the oldest archer_jax installs on. TPU VM images ship an older system python
# (Ubuntu 22.04: 3.10): when none is on PATH, it installs python3.11 and python3.11-venv with apt
# (from the deadsnakes PPA where the distribution has none), or fails with one line saying how.
#
#   PY=$(bash tpu/find_python.sh) && "$PY" -m venv ~/archer_jax_venv
#   bash tpu/find_python.sh --no-install     # only look
set -euo pipefail

CANDIDATES=(python3.13 python3.12 python3.11 python3)

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "usage: tpu/find_python.sh [--no-install]   (prints a Python >= 3.11 with venv, installing python3.11 if need be)"
  exit 0
fi

# The first candidate that is 3.11+ and can make a venv (Debian splits ensurepip into pythonX.Y-venv).
find_python() {
  local name path
  for name in "${CANDIDATES[@]}"; do
    path="$(command -v "$name" 2>/dev/null)" || continue
    if "$path" -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
      echo "$path"
      return 0
    fi
  done
  return 1
}

if find_python; then exit 0; fi
if [[ "${1:-}" != "--no-install" ]] && command -v apt-get >/dev/null 2>&1; then
  {
    sudo apt-get update -q
    sudo apt-get install -y -q python3.11 python3.11-venv || {
      sudo apt-get install -y -q software-properties-common &&
        sudo add-apt-repository -y ppa:deadsnakes/ppa &&
        sudo apt-get update -q &&
        sudo apt-get install -y -q python3.11 python3.11-venv
    }
  } >&2 || true
  if find_python; then exit 0; fi
fi
echo "error: $(hostname): archer_jax needs Python 3.11 or newer (with venv) and none was found or installed; install one (e.g. sudo apt-get install python3.11 python3.11-venv, from ppa:deadsnakes/ppa on Ubuntu 22.04) and run tpu/setup.sh again" >&2
exit 2
