"""The command line of ``python -m archer_jax.train``: flags, one-line errors, and the entry point.

    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    archer-jax-train --config=configs/20q.py --workdir=runs/20q --config.learner.critic_lr=2e-5

Every error a user can cause (a bad flag, an unknown config key, a bad value, a missing path, a
model that cannot be loaded, a stopped run) ends the process with one line naming the cause.
"""

from __future__ import annotations

import logging
import sys

from absl import app, flags
from ml_collections import config_flags

from archer_jax import distributed
from archer_jax.config import RENAMED, renamed
from archer_jax.envs.base import EnvError
from archer_jax.errors import ConfigError, TrainingError
from archer_jax.models.hub import ModelLoadError
from archer_jax.train import train_and_evaluate
from archer_jax.xla_flags import set_default_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:preset]).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, summary.json and the plot.")
_COORDINATOR = flags.DEFINE_string("coordinator", None, "Several processes: the coordinator's host:port "
                                   "(env ARCHER_JAX_COORDINATOR; TPU pod slices need none of these three).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Several processes: how many (env ARCHER_JAX_NUM_PROCESSES).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Several processes: this one's index (env ARCHER_JAX_PROCESS_ID).")


def _last_line(error: Exception) -> str:
    """The last non-empty line of an error's message (config files fail with a whole traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if _WORKDIR.value is None:
        sys.exit("error: --workdir is required (checkpoints, metrics and summary.json go there)")
    try:
        distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    except distributed.DistributedError as e:
        sys.exit(f"error: {e}")
    # Every process trains; the primary one talks (the others only warn).
    logging.getLogger("archer_jax").setLevel(logging.INFO if distributed.is_primary() else logging.WARNING)
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax and clu log every file they write
    try:
        config = _CONFIG.value
        config.keys()  # a config file that failed to load raises here
    except OSError as e:
        sys.exit(f"error: --config: {_last_line(e)}")
    try:
        train_and_evaluate(config, _WORKDIR.value)
    except (ConfigError, ModelLoadError, TrainingError, EnvError) as e:
        sys.exit(f"error: {e}")


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing with one-line errors: a bad value, an unknown or renamed ``--config.x`` key."""
    for arg in argv[1:]:
        key = arg.split("=")[0].removeprefix("--config.")
        if arg.startswith("--config.") and key in RENAMED:
            sys.exit(f"error: --{renamed(key)}")
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:  # a bad value; a config file's own error comes with its traceback: keep its last line
        head = str(e).splitlines()[0].split(": Error whilst parsing")[0]
        last = _last_line(e)
        sys.exit(f"error: {head}" + (f": {last}" if last != head.strip() else ""))
    except (AttributeError, KeyError) as e:  # ml_collections: an override of a key the config lacks
        name = str(e).strip("\"'")
        given = next((a.split("=")[0] for a in argv if a.startswith("--config.") and name in a), name)
        sys.exit(f"error: {given}: unknown config key (every key is listed in archer_jax/config.py)")


def run() -> None:
    """The console entry point (sets archer_jax's default XLA flags before JAX starts)."""
    set_default_flags()
    flags.mark_flag_as_required("config")
    app.run(main, flags_parser=parse_flags)
