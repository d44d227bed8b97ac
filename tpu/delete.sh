#!/usr/bin/env bash
# Deletes the TPU VM or pod slice (its disks go with it: sync the workdir to a bucket first).
#
#   tpu/delete.sh --name archer --zone us-central2-b [--dry-run]
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/delete.sh [--name NAME] [--zone ZONE] [--project P] [--dry-run]
USAGE
}

parse_common "$@"
(( ${#REST[@]} == 0 )) || die "delete.sh: unknown argument '${REST[0]}' (see --help)"
mapfile -t location < <(where)
run gcloud compute tpus tpu-vm delete "$NAME" "${location[@]}" --quiet
