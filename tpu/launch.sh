#!/usr/bin/env bash
# Starts the train command on every worker at once (in the background; logs in ~/archer_jax_train.log).
# On a pod slice the workers find each other by themselves (jax.distributed).
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
train=(python3 -m archer_jax.train "--config=$CONFIG" "--workdir=$WORKDIR" "${TRAIN_FLAGS[@]+"${TRAIN_FLAGS[@]}"}")
ssh_workers all "cd ~/archer_jax && nohup $(quote_all "${train[@]}") > ~/archer_jax_train.log 2>&1 < /dev/null &"
