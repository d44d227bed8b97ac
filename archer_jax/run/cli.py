"""The command line of ``python -m archer_jax.train``: flags, one-line errors, and the entry point.

    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    archer-jax-train --config=configs/20q.py --workdir=runs/20q --config.learner.critic_lr=2e-5

Every error a user can cause (a bad flag, an unknown config key, a bad value, a missing path, a
model that cannot be loaded, a stopped run) ends the process with one line naming the cause;
:mod:`archer_jax.run.preflight` finds the ones that need no model before anything is built.
``--help`` lists the flags and every config key with its default and one line of doc.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import traceback
from pathlib import Path

import jax
import ml_collections
from absl import app, flags
from ml_collections import config_flags

from archer_jax import config as config_lib
from archer_jax.config import FREE_FORM, RENAMED, flat_defaults, renamed, unknown_key, validate
from archer_jax.config_docs import KEY_DOCS
from archer_jax.envs.base import EnvError
from archer_jax.errors import ConfigError, TrainingError, one_line
from archer_jax.models.hub import ModelLoadError
from archer_jax.run.loop import train_and_evaluate
from archer_jax.runtime import distributed
from archer_jax.runtime.xla_flags import quiet_tpu_probe, set_default_flags

# New attributes: the free-form groups (config.FREE_FORM) take keys a config file does not name
# (--config.env.options.oracle=t5:DIR); every other new key is refused before parsing
# (_unknown_config_key) and by validation. The config is locked after parsing.
_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:preset]).", lock_config=False,
                                          accept_new_attributes=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics, summary.json and the plot.")
_COORDINATOR = flags.DEFINE_string("coordinator", None, "Several processes: the coordinator's host:port "
                                   "(env ARCHER_JAX_COORDINATOR; TPU pod slices need none of these three).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Several processes: how many (env ARCHER_JAX_NUM_PROCESSES).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Several processes: this one's index (env ARCHER_JAX_PROCESS_ID).")
_ALLOW_CONFIG_CHANGES = flags.DEFINE_bool(
    "allow_config_changes", False, "Resume a workdir with changed config keys that a resume otherwise refuses "
    "(the changes are applied and recorded in config.json and summary.json; see the README).")
_PRINT_CONFIG = flags.DEFINE_bool(
    "print_config", False, "Print the run's config (the file, its preset and every --config override) as JSON, "
    "check it, and exit: nothing is trained or written, and no --workdir is needed.")


def _last_line(error: Exception) -> str:
    """The last non-empty line of an error's message (config files fail with a whole traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _loaded_config() -> ml_collections.ConfigDict:
    """The parsed ``--config``; a config file that failed to load exits with its one line."""
    try:
        config = _CONFIG.value
        config.keys()  # a config file that failed to load raises here
    except OSError as e:
        sys.exit(f"error: --config: {_last_line(e)}")
    return config


def print_config() -> None:
    """``--print_config``: the effective config as JSON on stdout, then its validation's verdict
    (exit 0, or the one-line error)."""
    config = _loaded_config()
    sys.stdout.write(config.to_json_best_effort(indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()
    try:
        validate(config, weights=False)
    except ConfigError as e:
        sys.exit(f"error: {e}")
    sys.exit(0)


def main(argv: list[str]) -> None:
    del argv  # parse_flags refuses arguments that are no flags
    if _PRINT_CONFIG.value:
        print_config()
    if _WORKDIR.value is None:
        sys.exit("error: --workdir is required (checkpoints, metrics and summary.json go there)")
    try:
        distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    except distributed.DistributedError as e:
        sys.exit(f"error: {e}")
    _check_backend()
    # Every process trains; the primary one talks (the others only warn).
    logging.getLogger("archer_jax").setLevel(logging.INFO if distributed.is_primary() else logging.WARNING)
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax and clu log every file they write
    config = _loaded_config()
    try:
        train_and_evaluate(config, _WORKDIR.value, allow_config_changes=_ALLOW_CONFIG_CHANGES.value)
    except distributed.HostLost as e:  # a normal exit would wait for the dead host at JAX's shutdown
        distributed.exit_at_once(f"error: {e}")
    except (ConfigError, ModelLoadError, TrainingError, EnvError) as e:
        sys.exit(f"error: {e}")


def _check_backend() -> None:
    """Exits with one line when JAX cannot start a backend (``JAX_PLATFORMS`` naming a platform
    this machine or this jax lacks), before anything else touches one."""
    try:
        jax.devices()
    except Exception as e:  # noqa: BLE001 - RuntimeError, or a bare AssertionError for cuda without its plugin
        platforms = os.environ.get("JAX_PLATFORMS", "")
        named = f"JAX_PLATFORMS={platforms}: " if platforms else ""
        sys.exit(f"error: {named}JAX could not start a backend ({one_line(e)}); unset JAX_PLATFORMS to use what this "
                 "machine has, or install jax for that platform (for NVIDIA GPUs: pip install -e '.[cuda]')")


USAGE = ("usage: python -m archer_jax.train --config=configs/FILE.py[:PRESET] --workdir=DIR "
         "[--config.KEY=VALUE ...] [--allow_config_changes] [--print_config] [--coordinator=HOST:PORT --num_processes=N --process_id=I]")
HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull")
_CONFIG_PREFIXES = ("--config.", "-config.", "--noconfig.", "-noconfig.")
_PACKAGE = Path(__file__).resolve().parents[1]  # archer_jax/: its frames are no config file's


def _chosen_config(argv: list[str]) -> tuple[str, dict] | None:
    """(``PATH[:PRESET]``, its keys' values) of the ``--config`` file on the command line, or None
    (none given, or it does not load: ``--help`` then shows the base defaults)."""
    given = next((a.split("=", 1)[1] for a in argv[1:] if a.startswith(("--config=", "-config="))), None)
    if given is None:
        return None
    path, _, preset = given.partition(":")
    try:
        return given, config_lib.flat_values(config_lib.file_config(path, preset))
    except Exception:  # the run itself reports a config file that does not load
        return None


def help_text(argv: list[str] | None = None) -> str:
    """``--help``: usage, this program's flags, and every config key with its value and doc: the
    ``--config`` file's (and preset's) when the command line names one, else the base defaults."""
    lines = [USAGE, "", "Flags:"]
    for holder in (_CONFIG, _WORKDIR, _ALLOW_CONFIG_CHANGES, _PRINT_CONFIG, _COORDINATOR, _NUM_PROCESSES, _PROCESS_ID):
        lines.append(f"  --{holder.name:<22} {flags.FLAGS[holder.name].help}")
    chosen = _chosen_config(argv or [])
    defaults = flat_defaults() if chosen is None else chosen[1]
    shown = {key: "{}" if key in FREE_FORM else repr(value) for key, value in defaults.items()}
    key_width, value_width = max(map(len, shown)), max(map(len, shown.values()))
    where = ("base defaults, which a config file or preset may change" if chosen is None
             else f"the values of {chosen[0]}")
    lines += ["", f"Config keys (--config.KEY=VALUE; {where}):"]
    for key, value in shown.items():
        lines.append(f"  {key:<{key_width}}  {value:<{value_width}}  {KEY_DOCS.get(key, '')}")
    lines += ["", "Keys of archer_jax 0.1 and where they are now: archer_jax.config.RENAMED. "
              "More on each key: docs/algorithms.md (section 10)."]
    return "\n".join(lines) + "\n"


def _config_key(arg: str) -> str | None:
    """``learner.critic_lr`` for ``--config.learner.critic_lr=...`` (or ``--noconfig.x``); else None."""
    prefix = next((p for p in _CONFIG_PREFIXES if arg.startswith(p)), None)
    return arg[len(prefix):].split("=")[0] if prefix else None


def _unknown_config_key(argv: list[str]) -> str | None:
    """The one-line error for the first ``--config.x`` override of a key that does not exist."""
    known = flat_defaults()
    for arg in argv[1:]:
        key = _config_key(arg)
        if key is None or key in known or any(key.startswith(group + ".") for group in FREE_FORM):
            continue
        given = arg.split("=")[0]
        if key in RENAMED:
            return f"error: --{renamed(key)}"
        return f"error: {given}: {unknown_key(key)}"
    return None


def _config_file_error(error: Exception) -> str:
    """One line for an error raised by a config file's code: where in the file, and what."""
    if isinstance(error, SyntaxError):
        return f"{error.filename}, line {error.lineno}: SyntaxError: {error.msg}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "site-packages" not in f.filename
              and not Path(f.filename).resolve().is_relative_to(_PACKAGE)]  # a checkout may be named archer_jax
    where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {_last_line(error) or 'raised'}{where}"


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing with one-line errors: a bad value, an unknown or renamed ``--config.x``
    key (with the closest known key), an argument that is no flag (with the usage line, exit
    code 2); ``--help`` prints :func:`help_text` and exits 0. A free-form group takes new keys
    (``--config.env.options.oracle=t5:DIR``) or a whole dict (``--config.env.options='{"oracle": "t5:DIR"}'``)."""
    if any(arg in HELP_FLAGS for arg in argv[1:]):
        sys.stdout.write(help_text(argv))
        sys.exit(0)
    error = _unknown_config_key(argv)
    if error:
        sys.exit(error)
    try:
        rest = flags.FLAGS(argv)
    except flags.Error as e:  # a bad value; a config file's own error comes with its traceback: keep its last line
        head = str(e).splitlines()[0].split(": Error whilst parsing")[0]
        last = _last_line(e)
        sys.exit(f"error: {head}" + (f": {last}" if last != head.strip() else ""))
    except (AttributeError, KeyError) as e:  # ml_collections: an override of a key this config file lacks
        if re.search(r"has no attribute \\?'?get_config", str(e)):
            sys.exit("error: --config: the file defines no get_config(preset) (configs/20q.py shows one)")
        # Its message reads '\'game_pth\'\nDid you mean ...', escapes and all: keep the key.
        name = re.sub(r"[\\'\"]", "", str(e).split("\\n")[0])
        given = next((a.split("=")[0] for a in argv[1:] if (_config_key(a) or "").rsplit(".", 1)[-1] == name),
                     f"--config.{name}")
        sys.exit(f"error: {given}: unknown config key (not in this config file)")
    except Exception as e:  # the config file's own code failed (a syntax error, get_config raised)
        sys.exit(f"error: --config: {_config_file_error(e)}")
    try:
        config = _CONFIG.value
    except OSError:  # a config file that failed to load: main reports it
        config = None
    except Exception as e:
        sys.exit(f"error: --config: {_config_file_error(e)}")
    if config is not None:
        if not isinstance(config, ml_collections.ConfigDict):
            sys.exit(f"error: --config: get_config returned {type(config).__name__}, not an ml_collections.ConfigDict")
        config.lock()  # the run adds no keys to its config
    if len(rest) > 1:
        sys.stderr.write(USAGE + "\n")
        sys.stderr.write(f"error: unexpected argument(s): {' '.join(rest[1:])}\n")
        sys.exit(2)
    return rest


def run() -> None:
    """The console entry point (sets archer_jax's default XLA flags before JAX starts, and
    quiets JAX's TPU probe where there is no TPU)."""
    set_default_flags()
    quiet_tpu_probe()
    flags.mark_flag_as_required("config")
    app.run(main, flags_parser=parse_flags)
