#!/usr/bin/env bash
# Shared by the tpu/*.sh scripts (source it): the flags every script takes, and `run`, which
# executes a command or, with --dry-run, prints it (shell-quoted) instead.
#
#   --name NAME        the TPU VM or pod slice (default: $ARCHER_TPU_NAME or archer-jax)
#   --zone ZONE        (default: $ARCHER_TPU_ZONE or us-central2-b)
#   --project PROJECT  (default: $ARCHER_TPU_PROJECT or gcloud's configured project)
#   --dry-run          print the gcloud commands instead of running them
#   -h, --help         this script's usage

NAME="${ARCHER_TPU_NAME:-archer-jax}"
ZONE="${ARCHER_TPU_ZONE:-us-central2-b}"
PROJECT="${ARCHER_TPU_PROJECT:-}"
DRY_RUN=0
REST=()
# shellcheck disable=SC2034  # used by the scripts that source this file
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() {
  echo "error: $*" >&2
  exit 2
}

# Parses the shared flags; the script's own flags are left in REST, in order.
parse_common() {
  REST=()
  while (($#)); do
    case "$1" in
      --name) NAME="${2:?--name needs a value}"; shift 2 ;;
      --zone) ZONE="${2:?--zone needs a value}"; shift 2 ;;
      --project) PROJECT="${2:?--project needs a value}"; shift 2 ;;
      --dry-run) DRY_RUN=1; shift ;;
      -h|--help) usage; exit 0 ;;
      *) REST+=("$1"); shift ;;
    esac
  done
}

# gcloud's location flags for this VM.
where() {
  local flags=("--zone=$ZONE")
  if [[ -n "$PROJECT" ]]; then flags+=("--project=$PROJECT"); fi
  printf '%s\n' "${flags[@]}"
}

# WORD as a shell reads it back: bare when it is safe, else in single quotes; a leading ~/ stays
# outside the quotes, so the shell that runs it (a worker's) expands it.
quote() {
  local word="$1" prefix=""
  # shellcheck disable=SC2088  # a literal ~/, left for the worker's shell to expand
  if [[ "$word" == "~/"* ]]; then prefix="~/"; word="${word#"~/"}"; fi
  if [[ -n "$word" && "$word" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
    printf '%s%s' "$prefix" "$word"
  else
    printf "%s'%s'" "$prefix" "${word//\'/\'\\\'\'}"
  fi
}

# The words, quoted and joined by spaces: a command line.
quote_all() {
  local words=() word
  for word in "$@"; do words+=("$(quote "$word")"); done
  printf '%s' "${words[*]}"
}

run() {
  if ((DRY_RUN)); then
    quote_all "$@"
    echo
  else
    "$@"
  fi
}

# On a worker, TRAINER_ALIVE: process $pid is still a trainer (it fails once the process ended or
# its pid was reused); TRAINER_RUNNING: the trainer tpu/launch.sh started there
# (~/archer_jax_train.pid, read into $pid) is alive.
# shellcheck disable=SC2016,SC2034  # expanded on the workers; used by launch.sh and stop.sh
TRAINER_ALIVE='grep -qs archer_jax.train "/proc/$pid/cmdline"'
# shellcheck disable=SC2016,SC2034
TRAINER_RUNNING='pid=$(cat ~/archer_jax_train.pid 2>/dev/null) && '"$TRAINER_ALIVE"

# `gcloud compute tpus tpu-vm ssh` on WORKER (all, or an index) with a remote COMMAND.
ssh_workers() {
  local worker="$1" command="$2" location
  mapfile -t location < <(where)
  run gcloud compute tpus tpu-vm ssh "$NAME" "${location[@]}" "--worker=$worker" "--command=$command"
}

# The accelerator type of the VM or slice (v4-32, v5litepod-8, ...), as gcloud describes it, into
# ACCELERATOR_TYPE. With --dry-run the describe command is printed instead and ACCELERATOR_TYPE
# names what it would give.
accelerator_type() {
  local location describe
  mapfile -t location < <(where)
  describe=(gcloud compute tpus tpu-vm describe "$NAME" "${location[@]}" "--format=value(acceleratorType)")
  if ((DRY_RUN)); then
    quote_all "${describe[@]}"
    echo
    ACCELERATOR_TYPE="<acceleratorType of $NAME>"
    return
  fi
  ACCELERATOR_TYPE="$("${describe[@]}")" || die "cannot describe $NAME in $ZONE: see above"
  [[ -n "$ACCELERATOR_TYPE" ]] || die "gcloud describes $NAME in $ZONE without an acceleratorType"
}
