"""Rollouts: a batch of dialogues played in lockstep through an env pool by an acting function.

    episodes = rollout.play(pool, act, seeds=range(32), max_turns=20)   # split="eval" for evaluations
    rollout.summarize(episodes)   # {"return": ..., "success": ..., "length": ..., "worker_restarts": ...}

``act(observations, turn, games) -> actions`` is called once per turn with the observations of
the dialogues still running and their positions in ``seeds`` (the sampler, CHAI, or a scripted
expert behind it; the sampler keys each dialogue's samples by its game, so they do not depend on
which other games are still running). An action of None
ends its dialogue there, untaken (a walkthrough that has run out, an expert with nothing to say).
This is the library's one play loop: training rollouts, evaluations and SFT demonstrations all
come from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from archer_jax.envs.pool import EnvPool

Act = Callable[[list[str], int, list[int]], Sequence[str | None]]


@dataclasses.dataclass
class Episode:
    """One dialogue: its transitions and how it ended."""

    observations: list[str] = dataclasses.field(default_factory=list)
    actions: list[str] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    next_observations: list[str] = dataclasses.field(default_factory=list)
    terminals: list[bool] = dataclasses.field(default_factory=list)  # a true end (not a time limit)
    success: bool = False
    truncated: bool = False  # ended by a turn limit, a worker restart, or max_turns here
    invalid: int = 0  # actions the env answered as invalid
    # Env worker restarts while its batch was played (EnvPool.restarts): each batch charges them
    # to its first episode, so summing over episodes (hosts' batches included) counts restarts.
    worker_restarts: int = 0

    @property
    def total_return(self) -> float:
        return float(np.sum(self.rewards)) if self.rewards else 0.0

    def __len__(self) -> int:
        return len(self.actions)


def play(
    pool: EnvPool,
    act: Act,
    seeds: Sequence[int],
    *,
    max_turns: int,
    progress: Callable[[int], None] | None = None,
    split: str = "train",
    to_env: Callable[[str], str] | None = None,
) -> list[Episode]:
    """Plays one episode in each of the first ``len(seeds)`` envs of ``pool``, on ``split``'s
    tasks ("train", or "eval" for evaluations: see :mod:`archer_jax.envs.base`).

    Envs end their own episodes; any still running after ``max_turns`` turns is cut there as
    truncated, as is one whose action is None. ``progress(turn)`` is called after each turn.
    ``to_env`` maps an utterance to the action the env receives (e.g. the question in a JSON
    answer); the episode keeps the utterance itself.
    """
    n = len(seeds)
    if n > pool.num_envs:
        raise ValueError(f"{n} episodes need {n} envs; the pool has {pool.num_envs}")
    restarts = pool.restarts
    observations = pool.reset([int(s) for s in seeds], indices=range(n), split=split)
    episodes = [Episode() for _ in range(n)]
    running = list(range(n))
    for turn in range(max_turns):
        if not running:
            break
        actions = list(act([observations[i] for i in running], turn, list(running)))
        if len(actions) != len(running):
            raise ValueError(f"act returned {len(actions)} actions for {len(running)} observations")
        step_actions: list[str | None] = [None] * pool.num_envs
        for i, action in zip(running, actions):
            step_actions[i] = action if action is None or to_env is None else to_env(action)
        results = pool.step(step_actions)
        still = []
        for i, action in zip(running, actions):
            result, episode = results[i], episodes[i]
            if action is None:
                episode.truncated = True
                continue
            episode.observations.append(observations[i])
            episode.actions.append(action)
            episode.rewards.append(float(result.reward))
            episode.next_observations.append(result.observation)
            episode.terminals.append(bool(result.terminal))
            episode.invalid += bool(result.info.invalid)
            observations[i] = result.observation
            if result.done:
                episode.success, episode.truncated = bool(result.info.success), bool(result.info.truncated)
            else:
                still.append(i)
        running = still
        if progress is not None:
            progress(turn + 1)
    for i in running:
        episodes[i].truncated = True
    if episodes:
        episodes[0].worker_restarts = pool.restarts - restarts
    return episodes


def summarize(episodes: Sequence[Episode]) -> dict[str, float]:
    """Mean return, success rate, length and invalid-action rate of ``episodes``, and the env
    worker restarts while they were played (a count; the train loop reports it as
    ``rollout/worker_restarts``)."""
    lengths = np.array([len(e) for e in episodes], np.float64)
    return {
        "return": float(np.mean([e.total_return for e in episodes])),
        "success": float(np.mean([e.success for e in episodes])),
        "length": float(lengths.mean()),
        "invalid": float(sum(e.invalid for e in episodes) / max(lengths.sum(), 1)),
        "worker_restarts": float(sum(e.worker_restarts for e in episodes)),
    }
