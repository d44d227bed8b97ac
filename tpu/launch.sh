#!/usr/bin/env bash
# Starts the train command on every worker at once (in the background, with the Python that
# tpu/setup.sh installed; the log is appended to ~/archer_jax_train.log). A worker where a trainer
# is still running refuses in one line (tpu/stop.sh stops it); the run itself refuses a workdir
# that another run holds. On a pod slice the workers find each other by themselves (jax.distributed).
#
# First, on worker 0, `python -m archer_jax.plan` compiles every program of the run for the slice's
# accelerator type (with the --config.* train flags): a config that does not fit stops here, before
# any trainer starts. --skip-plan launches without it.
#
#   tpu/launch.sh --name archer --config configs/20q.py --workdir /mnt/my-bucket/runs/20q [-- --config.seed=1]
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
  cat <<'USAGE'
usage: tpu/launch.sh [--name NAME] [--zone ZONE] [--project P] --config FILE[:PRESET] --workdir DIR [--type TYPE] [--skip-plan] [--dry-run] [-- TRAIN_FLAGS...]
  --config     a config file of the checkout (e.g. configs/20q.py, configs/20q.py:tiny)
  --workdir    on a pod slice, a directory every worker shares (tpu/setup.sh --bucket mounts one)
  --type       the slice's accelerator type for the plan (v4-32, v5litepod-8, ...; default: gcloud describes the slice)
  --skip-plan  start the trainers without first running archer_jax.plan on worker 0 (it compiles every
               program for the slice and stops the launch if one does not fit; minutes at the paper's size)
  after --,    more train flags (e.g. --config.learner.critic_lr=2e-5); the plan gets the --config.* ones
USAGE
}

CONFIG="" WORKDIR="" ACCELERATOR_TYPE="" SKIP_PLAN=0 TRAIN_FLAGS=()
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
    --type) ACCELERATOR_TYPE="${2:?--type needs a value}"; shift 2 ;;
    --skip-plan) SKIP_PLAN=1; shift ;;
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

# The plan: every program of the run compiled for the slice on worker 0, with the --config.* train
# flags (--config.KEY=VALUE, or --config.KEY VALUE).
if ((!SKIP_PLAN)); then
  [[ -n "$ACCELERATOR_TYPE" ]] || accelerator_type
  # shellcheck disable=SC2088  # a literal ~/, expanded by the worker's shell
  plan=("~/archer_jax_venv/bin/python" -m archer_jax.plan "--config=$CONFIG" "--target=$ACCELERATOR_TYPE")
  flags=("${TRAIN_FLAGS[@]+"${TRAIN_FLAGS[@]}"}")
  for ((i = 0; i < ${#flags[@]}; i++)); do
    case "${flags[i]}" in
      --config.*=*) plan+=("${flags[i]}") ;;
      --config.*)
        plan+=("${flags[i]}")
        if ((i + 1 < ${#flags[@]})) && [[ "${flags[i + 1]}" != --* ]]; then plan+=("${flags[i + 1]}"); i=$((i + 1)); fi ;;
    esac
  done
  if ((!DRY_RUN)); then
    echo "tpu/launch.sh: planning $CONFIG for $ACCELERATOR_TYPE on worker 0 (--skip-plan skips this) ..." >&2
  fi
  status=0
  ssh_workers 0 "cd ~/archer_jax || exit 2; $(quote_all "${plan[@]}")" || status=$?
  if ((status == 1)); then
    echo "error: the plan says this config does not fit $ACCELERATOR_TYPE: see above; --skip-plan launches anyway" >&2
    exit 1
  elif ((status != 0)); then
    die "the plan did not finish on worker 0 (exit status $status): see above; --skip-plan launches anyway"
  fi
fi

ssh_workers all "cd ~/archer_jax || exit 2; if $TRAINER_RUNNING; then $refuse; fi; $start"
