#!/usr/bin/env bash
# Shows a worker's training log (worker 0 by default: the one that reports).
#
#   tpu/logs.sh --name archer [--worker 0] [--follow] [--lines 100] [--dry-run]
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/logs.sh [--name NAME] [--zone ZONE] [--project P] [--worker N|all] [--follow] [--lines N] [--dry-run]
USAGE
}

parse_common "$@"
WORKER=0 FOLLOW=0 LINES=100
set -- "${REST[@]+"${REST[@]}"}"
while (($#)); do
  case "$1" in
    --worker) WORKER="${2:?--worker needs a value}"; shift 2 ;;
    --follow|-f) FOLLOW=1; shift ;;
    --lines) LINES="${2:?--lines needs a value}"; shift 2 ;;
    *) die "logs.sh: unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$LINES" =~ ^[0-9]+$ ]] || die "logs.sh: --lines must be a number, got '$LINES'"
tail_flags="-n $LINES"
if ((FOLLOW)); then tail_flags+=" -f"; fi
ssh_workers "$WORKER" "tail $tail_flags ~/archer_jax_train.log"
