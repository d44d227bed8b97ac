"""The SFT warm start: (observation, action) pairs from scripted experts, a walkthrough or a file.

    observations, actions = sft.demonstrations(config)
    actor_state, metrics = sft.train(bc_step, actor_state, pipeline, observations, actions, ...)

``config.sft.data``:
  * ``experts``: ``config.sft.dialogues`` dialogues played by the env's scripted experts
    (``config.sft.experts``, taken in turn), e.g. a mix of optimal and faulty players;
  * ``walkthrough``: the game's own walkthrough (Detective, through jericho);
  * a ``.jsonl`` file: one ``{"observation": ..., "action": ...}`` object per line.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from archer_jax import model_oracle, rollout
from archer_jax.envs import registry
from archer_jax.envs.experts import EXPERTS
from archer_jax.envs.pool import EnvPool
from archer_jax.errors import ConfigError
from archer_jax.input_pipeline import InputPipeline
from archer_jax.learners.step_program import StepProgram
from archer_jax.learners.train_state import TrainState
from archer_jax.runtime.config_keys import key


SOURCES = ("experts", "walkthrough")  # sft.data besides a .jsonl file: the env's scripted demonstrations


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    """``config.sft``: the warm start's steps, learning rate and batch, and its demonstrations;
    ``__post_init__`` raises ValueError naming the key."""

    steps: int = key(0, "SFT warm-start steps before RL (0 = no warm start)", official="— (a separate BC run)")
    lr: float = key(1e-4, "SFT Adam learning rate")
    batch_size: int = key(16, "SFT pairs per step")
    data: str = key(
        "experts", "SFT demonstrations: experts | walkthrough (detective) | a .jsonl of {observation, action} lines")
    dialogues: int = key(512, "expert dialogues played for the SFT data (sft.data=experts)")
    experts: str = key("optimal", "comma-separated expert kinds (archer_jax.envs.experts.EXPERTS), taken in turn")
    # The warm start is the same for every run seed, as the paper's runs all start from one SFT checkpoint.
    seed: int = key(0, "the SFT seed (the same warm start for every run seed)")
    cache: str = key(
        "", 'a directory of SFT results: a run whose SFT would compute one stored there takes it ("" = off)')

    def __post_init__(self):
        for name in ("lr", "batch_size", "dialogues"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name}: must be > 0, got {value}")
        for name in ("steps", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.cache and Path(self.cache).expanduser().is_file():
            raise ValueError(f"cache: {self.cache} is a file; give a directory (made when missing)")
        if not self.steps and self.data not in SOURCES:
            raise ValueError(f"data: {self.data} is given but config.sft.steps is 0, so no warm start reads it; "
                             "set --config.sft.steps (> 0) or leave sft.data out")
        if self.steps:
            if self.data not in SOURCES and not Path(self.data).expanduser().is_file():
                raise ValueError(f"data: {self.data!r} is not 'experts', 'walkthrough' or an existing .jsonl file")
            if self.data == "experts":
                for kind in self.experts.split(","):
                    if kind.strip() not in EXPERTS:
                        raise ValueError(f"experts: unknown expert {kind.strip()!r}; known: {', '.join(EXPERTS)}")


def _play_one(pool: EnvPool, choose: Callable[[str], str | None], seed: int, turns: int, pairs: tuple[list, list]) -> None:
    """Plays one episode in ``pool``'s env, ``choose`` picking each action (None: stop), and
    appends each (observation, action) to ``pairs``."""
    (episode,) = rollout.play(pool, lambda observations, *_: [choose(observations[0])], [seed], max_turns=turns)
    pairs[0].extend(episode.observations)
    pairs[1].extend(episode.actions)


def _expert_dialogues(config) -> tuple[list[str], list[str]]:
    kinds = [k.strip() for k in config.sft.experts.split(",")]
    experts = [registry.expert(config, kind, seed=config.sft.seed * 1000 + i) for i, kind in enumerate(kinds)]
    rng = np.random.default_rng([config.sft.seed, 7])
    pairs: tuple[list[str], list[str]] = ([], [])
    with EnvPool(registry.env_factory(config.env, model_oracle.from_config(config.env)), 1) as pool:
        for d in range(config.sft.dialogues):
            _play_one(pool, experts[d % len(experts)].act, int(rng.integers(2**31)), config.env.max_turns, pairs)
    return pairs


def _walkthrough(config) -> tuple[list[str], list[str]]:
    pairs: tuple[list[str], list[str]] = ([], [])
    with EnvPool(registry.env_factory(config.env, model_oracle.from_config(config.env)), 1) as pool:
        env = pool.local_env(0)
        if not hasattr(env, "get_walkthrough"):
            raise ConfigError(f"config.sft.data: env {config.env.name!r} has no walkthrough")
        steps = iter(env.get_walkthrough())
        _play_one(pool, lambda _: next(steps, None), config.sft.seed, config.env.max_turns, pairs)
    return pairs


JSONL_FORMAT = '{"observation": "...", "action": "..."}'


def read_jsonl(path: str | Path) -> tuple[list[str], list[str]]:
    """The ``(observations, actions)`` of a ``.jsonl`` file of :data:`JSONL_FORMAT` objects (blank
    lines are skipped); a :class:`ConfigError` naming the file and line for anything else,
    including a file without a single pair."""
    path = Path(path).expanduser()
    where = f"config.sft.data: {path}"
    observations, actions = [], []
    try:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{where}:{number}: not JSON ({e.msg}); each line is {JSONL_FORMAT}") from None
                if not isinstance(record, dict):
                    raise ConfigError(f"{where}:{number}: a {type(record).__name__}, not an object; each line is {JSONL_FORMAT}")
                for key in ("observation", "action"):
                    if not isinstance(record.get(key), str):
                        found = "missing" if key not in record else f"a {type(record[key]).__name__}, not a string"
                        keys = ", ".join(map(repr, record)) or "none"
                        raise ConfigError(f"{where}:{number}: {key!r} is {found} (keys: {keys}); each line is {JSONL_FORMAT}")
                observations.append(record["observation"])
                actions.append(record["action"])
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it ({e.strerror or e})") from None
    if not observations:
        raise ConfigError(f"{where}: no (observation, action) pairs; each line is {JSONL_FORMAT}")
    return observations, actions


def demonstrations(config) -> tuple[list[str], list[str]]:
    """The SFT pairs ``(observations, actions)`` named by ``config.sft.data``."""
    if config.sft.data == "experts":
        pairs = _expert_dialogues(config)
    elif config.sft.data == "walkthrough":
        pairs = _walkthrough(config)
    else:
        pairs = read_jsonl(config.sft.data)
    if not pairs[0]:
        raise ConfigError(f"config.sft.data: {config.sft.data!r} gave no (observation, action) pairs")
    return pairs


def train(
    bc_step: StepProgram,
    state: TrainState,
    pipeline: InputPipeline,
    observations: Sequence[str],
    actions: Sequence[str],
    *,
    steps: int,
    batch_size: int,
    seed: int,
    progress: Callable[[int, dict], None] | None = None,
) -> tuple[TrainState, list[dict]]:
    """``steps`` behaviour-cloning steps on uniformly drawn pairs (each pair tokenized once).

    Returns the state and each step's metrics (host floats). ``progress(step, metrics)`` is
    called after every step.
    """
    obs_rows, act_rows = pipeline.policy_rows(observations), pipeline.demonstration_rows(actions)
    rng = np.random.default_rng([seed, 11])
    history = []
    for step in range(steps):
        index = rng.integers(0, len(obs_rows), batch_size)
        batch = pipeline.policy_rows_batch([obs_rows[i] for i in index], [act_rows[i] for i in index])
        state, metrics = bc_step(state, batch)
        metrics = {k: float(v) for k, v in metrics.items()}
        history.append(metrics)
        if progress is not None:
            progress(step + 1, metrics)
    return state, history
