#!/usr/bin/env bash
# Installs this checkout of archer_jax (with JAX for TPUs) on every worker of the VM, in a venv
# (~/archer_jax_venv) of a Python 3.11 or newer: TPU VM images ship an older system python, so
# tpu/find_python.sh finds one there or installs python3.11 (apt; the deadsnakes PPA on Ubuntu
# 22.04). With --bucket it mounts a Cloud Storage bucket at /mnt/BUCKET on every worker (gcsfuse):
# a pod slice's hosts write one checkpoint together, and a preempted VM's own disk is gone, so a
# workdir that must survive lives there.
#
#   tpu/setup.sh --name archer --zone us-central2-b [--bucket my-bucket] [--dry-run]
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/setup.sh [--name NAME] [--zone ZONE] [--project P] [--source DIR] [--bucket BUCKET] [--dry-run]
  --source  the checkout to install (default: this one; its committed HEAD is copied)
  --bucket  a bucket to mount at /mnt/BUCKET on every worker (for a shared workdir)
USAGE
}

parse_common "$@"
SOURCE="$REPO_ROOT" BUCKET=""
set -- "${REST[@]+"${REST[@]}"}"
while (($#)); do
  case "$1" in
    --source) SOURCE="${2:?--source needs a value}"; shift 2 ;;
    --bucket) BUCKET="${2:?--bucket needs a value}"; BUCKET="${BUCKET#gs://}"; BUCKET="${BUCKET%%/*}"; shift 2 ;;
    *) die "setup.sh: unknown argument '$1' (see --help)" ;;
  esac
done
ARCHIVE="${TMPDIR:-/tmp}/archer_jax-$NAME.tar.gz"
mapfile -t location < <(where)

run git -C "$SOURCE" archive --format=tar.gz --output="$ARCHIVE" HEAD
run gcloud compute tpus tpu-vm scp "$ARCHIVE" "$NAME:archer_jax.tar.gz" "${location[@]}" --worker=all
# shellcheck disable=SC2016  # expanded on the workers, not here
ssh_workers all 'rm -rf ~/archer_jax && mkdir -p ~/archer_jax && tar -xzf ~/archer_jax.tar.gz -C ~/archer_jax && python=$(bash ~/archer_jax/tpu/find_python.sh) && "$python" -m venv ~/archer_jax_venv && ~/archer_jax_venv/bin/python -m pip install -q -U pip && ~/archer_jax_venv/bin/python -m pip install -q -e ~/archer_jax "jax[tpu]"'
if [[ -n "$BUCKET" ]]; then
  # shellcheck disable=SC2016  # expanded on the workers, not here
  ssh_workers all 'command -v gcsfuse >/dev/null || { echo "deb [signed-by=/usr/share/keyrings/cloud.google.asc] https://packages.cloud.google.com/apt gcsfuse-$(lsb_release -c -s) main" | sudo tee /etc/apt/sources.list.d/gcsfuse.list && curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo tee /usr/share/keyrings/cloud.google.asc >/dev/null && sudo apt-get update -q && sudo apt-get install -y -q gcsfuse; }; sudo mkdir -p /mnt/'"$BUCKET"' && sudo chown "$USER" /mnt/'"$BUCKET"' && (mountpoint -q /mnt/'"$BUCKET"' || gcsfuse --implicit-dirs '"$BUCKET"' /mnt/'"$BUCKET"')'
fi
