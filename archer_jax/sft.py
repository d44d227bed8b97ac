"""The SFT warm start: (observation, action) pairs from scripted experts, a walkthrough or a file.

    observations, actions = sft.demonstrations(config)
    actor_state, metrics = sft.train(learner, actor_state, policy_tokenizer, observations, actions, ...)

``config.sft_data``:
  * ``experts``: ``config.sft_dialogues`` dialogues played by the env's scripted experts
    (``config.sft_experts``, taken in turn), e.g. a mix of optimal and faulty players;
  * ``walkthrough``: the game's own walkthrough (Detective, through jericho);
  * a ``.jsonl`` file: one ``{"observation": ..., "action": ...}`` object per line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from archer_jax.envs import registry
from archer_jax.learners import batches
from archer_jax.learners.learner import Learner
from archer_jax.learners.train_state import TrainState
from archer_jax.models.tokenizer import token_rows

def _play(env, observation: str, choose: Callable[[str], str | None], turns: int, pairs: tuple[list, list]) -> None:
    """Plays one episode from ``observation``, ``choose`` picking each action (None: stop),
    appending each (observation, action) to ``pairs``."""
    for _ in range(turns):
        action = choose(observation)
        if action is None:
            return
        pairs[0].append(observation)
        pairs[1].append(action)
        result = env.step(action)
        observation = result.observation
        if result.done:
            return


def _expert_dialogues(config) -> tuple[list[str], list[str]]:
    env = registry.env_factory(config)()
    kinds = [k.strip() for k in config.sft_experts.split(",")]
    experts = [registry.expert(config, kind, seed=config.sft_seed * 1000 + i) for i, kind in enumerate(kinds)]
    rng = np.random.default_rng([config.sft_seed, 7])
    pairs: tuple[list[str], list[str]] = ([], [])
    for d in range(config.sft_dialogues):
        observation = env.reset(int(rng.integers(2**31)))
        _play(env, observation, experts[d % len(experts)].act, config.max_turns, pairs)
    return pairs


def _walkthrough(config) -> tuple[list[str], list[str]]:
    env = registry.env_factory(config)()
    if not hasattr(env, "get_walkthrough"):
        raise ValueError(f"config.sft_data: env {config.env!r} has no walkthrough")
    steps = iter(env.get_walkthrough())
    pairs: tuple[list[str], list[str]] = ([], [])
    _play(env, env.reset(config.sft_seed), lambda _: next(steps, None), config.max_turns, pairs)
    return pairs


def _jsonl(path: Path) -> tuple[list[str], list[str]]:
    observations, actions = [], []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                observations.append(str(record["observation"]))
                actions.append(str(record["action"]))
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: expected {{\"observation\": ..., \"action\": ...}} ({e})") from None
    return observations, actions


def demonstrations(config) -> tuple[list[str], list[str]]:
    """The SFT pairs ``(observations, actions)`` named by ``config.sft_data``."""
    if config.sft_data == "experts":
        pairs = _expert_dialogues(config)
    elif config.sft_data == "walkthrough":
        pairs = _walkthrough(config)
    else:
        pairs = _jsonl(Path(config.sft_data).expanduser())
    if not pairs[0]:
        raise ValueError(f"config.sft_data: {config.sft_data!r} gave no (observation, action) pairs")
    return pairs


def train(
    learner: Learner,
    state: TrainState,
    tokenizer,
    observations: Sequence[str],
    actions: Sequence[str],
    *,
    steps: int,
    batch_size: int,
    seed: int,
    max_length: int,
    max_action_length: int,
    progress: Callable[[int, dict], None] | None = None,
) -> tuple[TrainState, list[dict]]:
    """``steps`` behaviour-cloning steps on uniformly drawn pairs (each pair tokenized once).

    Returns the state and each step's metrics (host floats). ``progress(step, metrics)`` is
    called after every step.
    """
    obs_rows = token_rows(tokenizer, observations, max_length=max_length)
    act_rows = batches.action_rows(tokenizer, actions, max_action_length=max_action_length)
    rng = np.random.default_rng([seed, 11])
    history = []
    for step in range(steps):
        index = rng.integers(0, len(obs_rows), batch_size)
        batch = batches.bc_batch_from_rows(
            tokenizer,
            [obs_rows[i] for i in index],
            [act_rows[i] for i in index],
            micro_batch_count=1,
            max_length=max_length,
            max_action_length=max_action_length,
        )
        state, metrics = learner.bc_step(state, batch)
        metrics = {k: float(v) for k, v in metrics.items()}
        history.append(metrics)
        if progress is not None:
            progress(step + 1, metrics)
    return state, history
