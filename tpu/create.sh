#!/usr/bin/env bash
# Creates a TPU VM (one host, e.g. v5litepod-8) or a pod slice (several hosts, e.g. v4-32).
#
#   tpu/create.sh --name archer --zone us-west4-a --type v5litepod-8 [--spot] [--dry-run]
#   tpu/create.sh --name archer --zone us-central2-b --type v4-32 --version tpu-ubuntu2204-base
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/create.sh [--name NAME] [--zone ZONE] [--project P] --type TYPE [--version V] [--spot] [--dry-run]
  --type     accelerator type: v5litepod-8 (v5e, one host), v4-8, v4-32 (four hosts), v5p-16, ...
  --version  TPU software version (default: v2-alpha-tpuv5-lite for v5e, tpu-ubuntu2204-base otherwise)
  --spot     a Spot VM (cheaper; may be preempted, and its disk goes with it: keep the workdir on a bucket,
             setup.sh --bucket, and the train command resumes from its last checkpoint there)
USAGE
}

parse_common "$@"
TYPE="" VERSION="" SPOT=0
set -- "${REST[@]+"${REST[@]}"}"
while (($#)); do
  case "$1" in
    --type) TYPE="${2:?--type needs a value}"; shift 2 ;;
    --version) VERSION="${2:?--version needs a value}"; shift 2 ;;
    --spot) SPOT=1; shift ;;
    *) die "create.sh: unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n "$TYPE" ]] || die "create.sh: --type is required (e.g. v5litepod-8 or v4-32)"
if [[ -z "$VERSION" ]]; then
  case "$TYPE" in
    v5litepod-*|v5e-*) VERSION="v2-alpha-tpuv5-lite" ;;
    *) VERSION="tpu-ubuntu2204-base" ;;
  esac
fi
mapfile -t location < <(where)
flags=("--accelerator-type=$TYPE" "--version=$VERSION")
if ((SPOT)); then flags+=("--spot"); fi
run gcloud compute tpus tpu-vm create "$NAME" "${location[@]}" "${flags[@]}"
