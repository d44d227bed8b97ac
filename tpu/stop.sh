#!/usr/bin/env bash
# Stops the trainer on every worker: SIGTERM, on which it finishes its current phase, saves a
# checkpoint and exits (the same launch.sh command resumes from it). Waits until every trainer
# has exited, unless --no-wait.
#
#   tpu/stop.sh --name archer --zone us-central2-b [--no-wait] [--dry-run]
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/stop.sh [--name NAME] [--zone ZONE] [--project P] [--worker N|all] [--no-wait] [--dry-run]
  --worker   the workers to stop (default: all; a pod slice's hosts stop together anyway)
  --no-wait  send the signal and return (the trainer saves its checkpoint in the background)
USAGE
}

parse_common "$@"
WORKER=all WAIT=1
set -- "${REST[@]+"${REST[@]}"}"
while (($#)); do
  case "$1" in
    --worker) WORKER="${2:?--worker needs a value}"; shift 2 ;;
    --no-wait) WAIT=0; shift ;;
    *) die "stop.sh: unknown argument '$1' (see --help)" ;;
  esac
done
# shellcheck disable=SC2016  # expanded on the workers
signal='kill -TERM "$pid" && echo "$(hostname): sent SIGTERM to the trainer (pid $pid): it saves a checkpoint and exits"'
# shellcheck disable=SC2016
wait_for='{ while '"$TRAINER_ALIVE"'; do sleep 1; done; echo "$(hostname): the trainer has exited (tpu/logs.sh shows its last lines)"; }'
# shellcheck disable=SC2016
none='echo "$(hostname): no trainer is running"'
if ((WAIT)); then signal="$signal && $wait_for"; fi
ssh_workers "$WORKER" "if $TRAINER_RUNNING; then $signal; else $none; fi"
