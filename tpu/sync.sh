#!/usr/bin/env bash
# Copies a run's workdir (checkpoints, summary, TensorBoard events) from a worker to a bucket, or
# back from a bucket to the worker (to resume a run there). With a workdir on a mounted bucket
# (tpu/setup.sh --bucket) nothing needs copying.
#
#   tpu/sync.sh --name archer --workdir ~/runs/20q --to gs://my-bucket/runs/20q [--dry-run]
#   tpu/sync.sh --name archer --workdir ~/runs/20q --from gs://my-bucket/runs/20q [--dry-run]
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/sync.sh [--name NAME] [--zone ZONE] [--project P] --workdir DIR (--to gs://... | --from gs://...) [--worker N] [--dry-run]
USAGE
}

parse_common "$@"
WORKDIR="" TO="" FROM="" WORKER=0
set -- "${REST[@]+"${REST[@]}"}"
while (($#)); do
  case "$1" in
    --workdir) WORKDIR="${2:?--workdir needs a value}"; shift 2 ;;
    --to) TO="${2:?--to needs a value}"; shift 2 ;;
    --from) FROM="${2:?--from needs a value}"; shift 2 ;;
    --worker) WORKER="${2:?--worker needs a value}"; shift 2 ;;
    *) die "sync.sh: unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n "$WORKDIR" ]] || die "sync.sh: --workdir is required"
[[ -n "$TO" || -n "$FROM" ]] || die "sync.sh: give --to gs://BUCKET/PATH or --from gs://BUCKET/PATH"
[[ -z "$TO" || -z "$FROM" ]] || die "sync.sh: give one of --to and --from"
bucket="${TO:-$FROM}"
[[ "$bucket" == gs://* ]] || die "sync.sh: '$bucket' is not a gs:// path"
if [[ -n "$TO" ]]; then
  ssh_workers "$WORKER" "gcloud storage rsync --recursive $(quote_all "$WORKDIR" "$TO")"
else
  ssh_workers "$WORKER" "mkdir -p $(quote "$WORKDIR") && gcloud storage rsync --recursive $(quote_all "$FROM" "$WORKDIR")"
fi
