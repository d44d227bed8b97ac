"""What a resumed run may change in its config, and how the change is recorded.

A workdir's ``config.json`` is the config its run is using. When the same workdir is run again
with a checkpoint to resume, the new config is compared with it, key by key:

- :data:`FREE` keys (how long to run, how often to report, where and how to compute) change
  freely: they do not change what is learned from a given state.
- :data:`FIXED` keys (less the :data:`FREE` ones among them, such as ``sft.cache``) cannot change: the checkpoint was made under them (its networks, replay
  buffer, warm start and random streams), so a new value could not be applied truthfully.
- Every other key (learning rates, gamma, step counts, sampling, ...) changes only with
  ``--allow_config_changes``; it then applies from the next iteration on.

Every change that is applied is kept in the loop state and summary.json
(``config_changes``: the iteration after which it applied, and each key's old and new value),
and config.json holds the config in use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_collections

from archer_jax.config import base_config
from archer_jax.errors import ConfigError

FREE = (
    "iterations", "eval_freq", "eval_sampled", "save_freq", "keep_checkpoints", "max_nonfinite_steps", "use_wandb", "wandb_project",
    "compilation_cache", "env.workers", "env.timeout_s", "learner.micro_batch_size", "model.remat", "mesh.data",
    "mesh.fsdp", "mesh.tensor", "offline.data_dir", "sft.cache",
)
FIXED = (
    "agent", "seed", "capacity", "env.name", "model.policy", "model.critic", "model.critic_embedding", "model.lora.",
    "model.prompt_format",
    "learner.actor_loss", "sft.",  # "sft.": every key of the warm start, which is done
    "init_from", "model.critic_init", "offline.dataset", "offline.split", "offline.generate_",  # where the run started; its dataset
    "offline.policy_mix",
    "ppo.adv_estimator", "ppo.value_head", "ppo.kl_coef",  # the actor's value head, and its reference copy
)

Changes = dict[str, tuple[Any, Any]]


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"learner.gamma": 0.95, ...}`` from a nested config dict (env options included)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def as_json(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """The config as the JSON that config.json holds."""
    return json.loads(config.to_json_best_effort())


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> Changes:
    """``{key: (old, new)}`` for every key whose value differs (None where a key is absent). A key
    that ``before`` lacks and ``after`` holds at its default is no change: a run recorded by an
    older version, before the key existed, ran with that default."""
    defaults = flatten(as_json(base_config()))
    a, b = flatten(before), flatten(after)
    return {
        k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k) and not (k not in a and k in defaults and b.get(k) == defaults[k])
    }


def _matches(key: str, names: tuple[str, ...]) -> bool:
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in names)


def _describe(changes: Changes) -> str:
    return ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())


def check_resume(changes: Changes, workdir: Path, allow: bool) -> Changes:
    """The changes a resume applies; raises :class:`ConfigError` (one line naming the keys) for a
    change of a :data:`FIXED` key, or of any non-:data:`FREE` key unless ``allow``."""
    fixed = {k: v for k, v in changes.items() if _matches(k, FIXED) and not _matches(k, FREE)}
    if fixed:
        raise ConfigError(
            f"{workdir}: the run there was made with other values of keys a resume cannot change ({_describe(fixed)}); "
            "use them again, or start a new --workdir"
        )
    guarded = {k: v for k, v in changes.items() if not _matches(k, FREE)}
    if guarded and not allow:
        raise ConfigError(
            f"{workdir}: the config differs from the run's config.json ({_describe(guarded)}); run with the same "
            "values, start a new --workdir, or pass --allow_config_changes to apply them from the next iteration on"
        )
    return changes


def recorded(workdir: Path) -> dict[str, Any] | None:
    """The config.json of ``workdir``, or None (none yet, or unreadable)."""
    path = Path(workdir) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def record(workdir: Path, config: ml_collections.ConfigDict) -> None:
    """Writes ``config.json``: the config the run uses from now on."""
    path = Path(workdir) / "config.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(as_json(config), indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
