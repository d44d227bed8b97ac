"""Every training command the docs show runs as written: it names a workdir, its config file and
preset exist, and its ``--config.KEY=VALUE`` overrides parse and validate (no model is built).

The commands are read from README.md, docs/*.md, tpu/README.md and the docstrings of configs/*.py,
with backslash continuations joined and trailing ``# comments`` cut. Models named by the hub are
not looked up (that needs the network).
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
from absl import flags
from ml_collections import config_flags

from archer_jax import config
from archer_jax.errors import ConfigError
from archer_jax.run import cli

ROOT = Path(__file__).resolve().parents[1]
TRAIN = "python -m archer_jax.train "


def _texts() -> dict[str, str]:
    out = {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", ROOT / "tpu" / "README.md",
                                                             *sorted((ROOT / "docs").glob("*.md"))]}
    for path in sorted((ROOT / "configs").glob("*.py")):
        out[str(path.relative_to(ROOT))] = ast.get_docstring(ast.parse(path.read_text())) or ""
    return out


def _commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every full train command (one with ``--config=``) in the docs."""
    found = []
    for where, text in _texts().items():
        joined = re.sub(r"\\\n\s*", " ", text)
        for line in joined.splitlines():
            start = line.find(TRAIN)
            if start < 0 or "--config=" not in line[start:]:
                continue
            command = line[start:].split(" # ")[0].split("`")[0].strip()
            found.append((where, command))
    return found


COMMANDS = _commands()


def test_the_docs_show_train_commands():
    assert len(COMMANDS) >= 15, COMMANDS  # the reader below found the docs' commands
    assert {where for where, _ in COMMANDS} >= {"README.md", "configs/20q.py", "configs/20q_ppo.py"}


def _parse(args: list[str]):
    """The config ``python -m archer_jax.train ARGS`` would train, from a fresh flag set."""
    values = flags.FlagValues()
    argv = ["train", *args]  # config_flags finds the overrides in the argv it is given
    # As the command line defines it (archer_jax/run/cli.py): free-form groups take new keys.
    config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=False,
                                    accept_new_attributes=True, sys_argv=argv)
    for name in ("workdir", "coordinator"):
        flags.DEFINE_string(name, None, "", flag_values=values)
    for name in ("num_processes", "process_id"):
        flags.DEFINE_integer(name, None, "", flag_values=values)
    flags.DEFINE_bool("allow_config_changes", False, "", flag_values=values)
    values(argv)
    return values


@pytest.mark.parametrize("where, command", COMMANDS, ids=[f"{w}:{i}" for i, (w, _) in enumerate(COMMANDS)])
def test_a_documented_train_command_runs_as_written(where, command, monkeypatch):
    monkeypatch.chdir(ROOT)  # the docs' config paths are relative to the repository
    monkeypatch.setattr(config, "_check_model", lambda *a, **k: None)  # hub names need the network: not here
    args = shlex.split(command)[len(TRAIN.split()):]
    assert any(a.startswith("--workdir=") for a in args), f"{where}: {command!r} has no --workdir"
    assert cli._unknown_config_key(["train", *args]) is None, f"{where}: {command!r}"
    values = _parse(args)
    assert values.workdir
    try:
        config.validate(values.config)
    except ConfigError as e:  # only a file of the user's own that this machine lacks (a dataset, a game)
        paths = [a.split("=", 1)[1] for a in args if a.startswith("--config.") and "/" in a]
        assert any(p in str(e) for p in paths), f"{where}: {command!r}: {e}"
