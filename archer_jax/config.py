"""The training config: every key with its default, and its validation before anything is built.

Config files (``configs/*.py``) start from :func:`base_config` and change values, never keys::

    def get_config(preset=""):
        c = config.base_config()
        c.env = "guess_my_city"
        return c

The defaults are the paper's online setting (DESIGN §1) for Twenty Questions. :func:`validate`
checks a finished config (after ``--config.x=...`` overrides) and raises :class:`ConfigError`
with one line naming the key: unknown keys, wrong types, unknown agent/env/loss names, values out
of range, a policy or critic directory that does not exist.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import ml_collections

AGENTS = ("archer", "chai", "filtered_bc")
ACTOR_LOSSES = ("actor_pg", "actor_token_baseline")
EMBEDDINGS = ("pooler", "first_token")
DTYPES = ("float32", "bfloat16")
TINY_PREFIX = "tiny:"  # "tiny:gpt2" / "tiny:roberta": built offline (archer_jax.models.build_tiny)


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type or out of range; the message names the key."""


def base_config() -> ml_collections.ConfigDict:
    """Every config key with the paper's online defaults for Twenty Questions."""
    c = ml_collections.ConfigDict()

    # What to train.
    c.agent = "archer"  # archer | chai | filtered_bc
    c.env = "twenty_questions"  # a name in archer_jax.envs.registry (or "package.module:factory")
    c.env_options = ml_collections.ConfigDict()  # extra keyword arguments for the env (e.g. game_path)
    c.policy = "gpt2"  # hub name, HF-format directory, or tiny:gpt2
    c.critic = "roberta-base"  # hub name, HF-format directory, or tiny:roberta
    c.critic_embedding = "pooler"  # pooler | first_token
    c.dtype = "float32"  # compute dtype: float32 | bfloat16
    c.seed = 0

    # ArCHer (official online hyperparameters).
    c.iterations = 2000
    c.rollout_size = 128  # dialogues collected per iteration
    c.eval_size = 32  # greedy dialogues per evaluation
    c.capacity = 100_000  # replay buffer transitions
    c.batch_size = 8
    c.grad_accum_steps = 32  # micro-batches averaged per optimizer step
    c.epochs = 50  # critic steps per iteration (BC steps for filtered_bc)
    c.actor_epochs = 3  # actor steps per iteration after warmup_iter
    c.warmup_iter = 20
    c.critic_lr = 2e-5
    c.lm_lr = 1e-6
    c.gamma = 0.95
    c.tau = 0.1
    c.max_grad_norm = 1.0
    c.actor_loss = "actor_pg"  # actor_pg | actor_token_baseline
    c.chai_samples = 5  # CHAI: candidate actions per state
    c.filtered_bc_fraction = 0.1  # filtered BC: top fraction of trajectories kept

    # Sampling.
    c.max_new_tokens = 32
    c.temperature = 1.0
    c.top_k = 0  # 0 = off
    c.top_p = 1.0
    c.max_prompt_length = 512  # policy prompt tokens (left-truncated)
    c.max_critic_length = 512  # critic tokens per text (left-truncated)

    # Environments.
    c.env_workers = 0  # worker processes for the env pool; 0 = in-process
    c.env_timeout_s = 120.0  # a worker silent this long is restarted
    c.max_turns = 20

    # SFT warm start (0 steps = none).
    c.sft_steps = 0
    c.sft_lr = 1e-4
    c.sft_batch_size = 16
    c.sft_data = "experts"  # experts | walkthrough (detective) | path to a .jsonl of {observation, action}
    c.sft_dialogues = 512  # expert dialogues played for the SFT data
    c.sft_experts = "optimal"  # comma-separated kinds from archer_jax.envs.experts.EXPERTS
    # Seed of the SFT data and batch order: the warm start is the same for every run seed, as the
    # paper's runs all start from one SFT checkpoint.
    c.sft_seed = 0

    # Bookkeeping.
    c.eval_freq = 25  # iterations between greedy evaluations (0 = only before and at the end)
    c.save_freq = 25  # iterations between checkpoints (the last iteration is always saved)
    c.keep_checkpoints = 2
    c.max_nonfinite_steps = 10  # consecutive skipped (non-finite) steps that stop the run
    c.use_wandb = False
    c.wandb_project = "archer_jax"
    # JAX's persistent compilation cache: a second run (another seed, a resume) loads its compiled
    # programs instead of compiling them again. "" = off. JAX_COMPILATION_CACHE_DIR, when set, wins.
    c.compilation_cache = "~/.cache/archer_jax/xla"

    # Device mesh (-1 = all remaining devices).
    c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    return c


def _flatten(c: ml_collections.ConfigDict, prefix: str = "") -> dict:
    out = {}
    for key, value in c.items():
        name = f"{prefix}{key}"
        if isinstance(value, ml_collections.ConfigDict) and key != "env_options":
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _type_ok(value, default) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, ml_collections.ConfigDict):
        return isinstance(value, (ml_collections.ConfigDict, dict))
    return isinstance(value, type(default))


def _check_model(key: str, name: str, kind: str) -> None:
    if name.startswith(TINY_PREFIX):
        if name != TINY_PREFIX + kind:
            raise ConfigError(f"config.{key}: {name!r} is not a tiny model for this role; use {TINY_PREFIX + kind!r}")
        return
    from archer_jax.models import hub

    path = Path(name).expanduser()
    if path.exists() or hub._looks_like_path(name):
        if not path.is_dir():
            raise ConfigError(f"config.{key}: model directory {name} does not exist")
        if not (path / "config.json").is_file():
            raise ConfigError(f"config.{key}: {name} has no config.json (not a Hugging Face model directory)")
    elif hub.is_offline():  # a hub name must already be cached (online, the loader downloads it)
        try:
            hub.resolve(name)
        except hub.ModelLoadError as e:
            raise ConfigError(f"config.{key}: {e}") from None


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises :class:`ConfigError` (one line, naming the key) unless ``config`` can be trained."""
    from archer_jax.envs import registry

    base = _flatten(base_config())
    given = _flatten(config)
    for key in given:
        if key not in base:
            raise ConfigError(f"config.{key}: unknown config key (known keys: archer_jax/config.py)")
    for key, default in base.items():
        if key not in given:
            raise ConfigError(f"config.{key}: missing (configs start from archer_jax.config.base_config())")
        if not _type_ok(given[key], default):
            raise ConfigError(
                f"config.{key}: expected {type(default).__name__}, got {type(given[key]).__name__} {given[key]!r}"
            )
    c = config

    def choice(key: str, allowed: tuple) -> None:
        if getattr(c, key) not in allowed:
            raise ConfigError(f"config.{key}: unknown value {getattr(c, key)!r}; known: {', '.join(allowed)}")

    def positive(*keys: str, zero: bool = False) -> None:
        for key in keys:
            value = given[key]
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
                raise ConfigError(f"config.{key}: must be {'>= 0' if zero else '> 0'}, got {value}")

    choice("agent", AGENTS)
    choice("actor_loss", ACTOR_LOSSES)
    choice("critic_embedding", EMBEDDINGS)
    choice("dtype", DTYPES)
    registry.check(c.env)
    positive("iterations", "rollout_size", "eval_size", "capacity", "batch_size", "grad_accum_steps",
             "max_new_tokens", "max_prompt_length", "max_critic_length", "max_turns", "sft_batch_size",
             "sft_dialogues", "chai_samples", "critic_lr", "lm_lr", "sft_lr", "temperature", "env_timeout_s",
             "keep_checkpoints", "max_nonfinite_steps")
    positive("epochs", "actor_epochs", "warmup_iter", "sft_steps", "env_workers", "eval_freq", "save_freq",
             "top_k", zero=True)
    for key in ("gamma", "tau", "filtered_bc_fraction", "top_p"):
        if not 0 <= given[key] <= 1:
            raise ConfigError(f"config.{key}: must be in [0, 1], got {given[key]}")
    if c.filtered_bc_fraction == 0 or c.top_p == 0:
        raise ConfigError("config.filtered_bc_fraction and config.top_p must be > 0")
    if not math.isfinite(c.max_grad_norm):
        raise ConfigError(f"config.max_grad_norm: must be finite, got {c.max_grad_norm}")
    for axis in ("data", "fsdp", "tensor"):
        if c.mesh[axis] == 0 or c.mesh[axis] < -1:
            raise ConfigError(f"config.mesh.{axis}: must be -1 (all remaining devices) or >= 1, got {c.mesh[axis]}")
    _check_model("policy", c.policy, "gpt2")
    if c.agent != "filtered_bc":
        _check_model("critic", c.critic, "roberta")
    if c.sft_steps:
        data = c.sft_data
        if data not in ("experts", "walkthrough") and not Path(os.path.expanduser(data)).is_file():
            raise ConfigError(f"config.sft_data: {data!r} is not 'experts', 'walkthrough' or an existing .jsonl file")
        if data == "experts":
            from archer_jax.envs.experts import EXPERTS

            for kind in c.sft_experts.split(","):
                if kind.strip() not in EXPERTS:
                    raise ConfigError(f"config.sft_experts: unknown expert {kind.strip()!r}; known: {', '.join(EXPERTS)}")
    registry.check_options(c.env, c)
