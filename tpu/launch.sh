#!/usr/bin/env bash
# Starts the train command on every worker at once (in the background, with the Python that
# tpu/setup.sh installed; the log is appended to ~/archer_jax_train.log). A worker where a trainer
# is still running refuses in one line (tpu/stop.sh stops it); the run itself refuses a workdir
# that another run holds. On a pod slice the workers find each other by themselves (jax.distributed).
#
#   tpu/launch.sh --name archer --config configs/20q.py --workdir /mnt/my-bucket/runs/20q [-- --config.seed=1]
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/launch.sh [--name NAME] [--zone ZONE] [--project P] --config FILE[:PRESET] --workdir DIR [--dry-run] [-- TRAIN_FLAGS...]
  --config   a config file of the checkout (e.g. configs/20q.py, configs/20q.py:tiny)
  --workdir  on a pod slice, a directory every worker shares (tpu/setup.sh --bucket mounts one)
  after --,  more train flags (e.g. --config.learner.critic_lr=2e-5)
USAGE
}

CONFIG="" WORKDIR="" TRAIN_FLAGS=()
args=()
while (($#)); do
  if [[ "$1" == "--" ]]; then shift; TRAIN_FLAGS=("$@"); break; fi
  args+=("$1"); shift
done
parse_common "${args[@]+"${args[@]}"}"
set -- "${REST[@]+"${REST[@]}"}"
while (($#)); do
  case "$1" in
    --config) CONFIG="${2:?--config needs a value}"; shift 2 ;;
    --workdir) WORKDIR="${2:?--workdir needs a value}"; shift 2 ;;
    *) die "launch.sh: unknown argument '$1' (see --help; train flags go after --)" ;;
  esac
done
[[ -n "$CONFIG" ]] || die "launch.sh: --config is required (e.g. configs/20q.py)"
[[ -n "$WORKDIR" ]] || die "launch.sh: --workdir is required (shared by the workers on a pod slice)"
# shellcheck disable=SC2088  # a literal ~/, expanded by the worker's shell (quote keeps it bare)
train=("~/archer_jax_venv/bin/python" -m archer_jax.train "--config=$CONFIG" "--workdir=$WORKDIR" "${TRAIN_FLAGS[@]+"${TRAIN_FLAGS[@]}"}")
# shellcheck disable=SC2016  # expanded on the workers
refuse='echo "error: $(hostname): a trainer is already running (pid $pid; tpu/stop.sh stops it)" >&2; exit 2'
# shellcheck disable=SC2016
header='echo "=== $(date -u "+%F %T UTC") tpu/launch.sh" >> ~/archer_jax_train.log'
# $! is the trainer's own pid (nohup execs it); stop.sh signals it.
start="$header; nohup $(quote_all "${train[@]}") >> ~/archer_jax_train.log 2>&1 < /dev/null & echo \$! > ~/archer_jax_train.pid"
ssh_workers all "cd ~/archer_jax || exit 2; if $TRAINER_RUNNING; then $refuse; fi; $start"
