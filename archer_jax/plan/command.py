"""``python -m archer_jax.plan``: its flags, one-line errors and ``--help``; the plan itself is
:mod:`archer_jax.plan.planner`'s.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

import jax
from absl import app, flags
from jax._src import xla_bridge

from archer_jax.config import validate
from archer_jax.errors import ConfigError
from archer_jax.plan import slices
import archer_jax.plan
from archer_jax.plan.planner import not_fitting_line, plan_run, table
from archer_jax.run import cli, preflight
from archer_jax.runtime.xla_flags import quiet_tpu_probe, set_default_flags

_TARGET = flags.DEFINE_string("target", "local", "The accelerator: a TPU type as gcloud names it (v5litepod-8, "
                              "v4-32, v5p-8, v6e-8, ...) or local (this machine's devices).")
_JSON = flags.DEFINE_string("json", None, "Also write the plan as JSON to this path.")


def main(argv: list[str]) -> None:
    del argv
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        config = cli._CONFIG.value
        config.keys()
        config = validate(config, weights=False)
        target = slices.get(_TARGET.value)
        if _JSON.value:
            check_json_path(Path(_JSON.value).expanduser())
    except (OSError, ConfigError, slices.TargetError) as e:
        sys.exit(f"error: {cli._last_line(e)}")
    if target.is_tpu and not xla_bridge.backends_are_initialized():
        # Compiling for a slice needs no local accelerator: on a TPU VM of a pod slice, a local TPU
        # backend would wait for the other hosts. This process computes nothing on its own devices.
        jax.config.update("jax_platforms", "cpu")
    try:
        preflight.check_mesh(config.mesh, len(target.devices()))
    except ConfigError as e:
        sys.exit(f"error: {e} (on {target.name})")
    with tempfile.TemporaryDirectory() as workdir:  # tiny models are built here (nothing else is written)
        try:
            plan = plan_run(config, target, Path(workdir), config_name=flags.FLAGS["config"].serialize().split("=", 1)[-1])
        except ConfigError as e:
            sys.exit(f"error: {e}")
    print(table(plan))
    if _JSON.value:
        Path(_JSON.value).write_text(json.dumps(dataclasses.asdict(plan), indent=2) + "\n")
    line = not_fitting_line(plan)
    if line:
        sys.exit(line)


def check_json_path(path: Path) -> None:
    """``--json`` names a file that can be written (checked before minutes of compiling)."""
    if path.is_dir():
        raise ConfigError(f"--json: {path} is a directory; give a file path, e.g. --json={path / 'plan.json'}")
    if not path.parent.is_dir():
        raise ConfigError(f"--json: {path.parent} is not a directory")
    if not os.access(path.parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"--json: {path} cannot be written")


USAGE = ("usage: python -m archer_jax.plan --config=configs/FILE.py[:PRESET] --target=SLICE [--json=PATH] "
         "[--config.KEY=VALUE ...]")


def parse_flags(argv: list[str]) -> list[str]:
    """The train command's flag parsing (one-line errors, config keys), with this command's ``--help``."""
    if any(arg in cli.HELP_FLAGS for arg in argv[1:]):
        lines = [USAGE, "", archer_jax.plan.__doc__.split("\n\n")[0].replace("\n", " "), "", "Flags:",
                 f"  --config    {flags.FLAGS['config'].help}"]
        lines += [f"  --{f.name:<9} {flags.FLAGS[f.name].help}" for f in (_TARGET, _JSON)]
        lines += ["", f"Targets: {', '.join(slices.names())}.",
                  "Config keys (--config.KEY=VALUE): as for python -m archer_jax.train --help."]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.exit(0)
    return cli.parse_flags(argv)


def run() -> None:
    """The entry point (``python -m archer_jax.plan``)."""
    set_default_flags()
    quiet_tpu_probe()
    flags.mark_flag_as_required("config")
    app.run(main, flags_parser=parse_flags)
