"""The acting half of every iteration: dialogues played by an agent, and stored for learning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np

from archer_jax import rollout
from archer_jax.run import report
from archer_jax.agents.agent import EVAL, ROLLOUT, Agent
from archer_jax.distributed import concat_gathered, host_share
from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer

if TYPE_CHECKING:
    from archer_jax.components import Components

EVAL_SEED = 10**6  # evaluation dialogues use fixed seeds, the same every evaluation


def _play(run: Components, agent: Agent, states: States, seeds: Sequence[int], key, greedy: bool, label: str,
          split: str = "train"):
    """Plays ``seeds`` on ``split``'s tasks (this host its share,
    :func:`archer_jax.distributed.host_share`); every host returns all the episodes, in the order
    of ``seeds``. Dialogue ``g`` samples with keys folded with ``g``, whichever host plays it."""
    share = host_share(len(seeds))

    def act(observations: list[str], turn: int, games: list[int]) -> list[str]:
        rows = [share.start + g for g in games]
        return agent.act(run, states, observations, jax.random.fold_in(key, turn), greedy, rows)

    max_turns = run.config.env.max_turns
    with report.progress_bar(max_turns, label, "turn") as bar:  # tqdm on a terminal, else a line every 30 s
        mine = rollout.play(run.pool, act, [seeds[i] for i in share], max_turns=max_turns,
                            progress=lambda t: bar.update(t - bar.n), split=split,
                            to_env=run.pipeline.prompter.env_action) if len(share) else []
    return concat_gathered(mine)


def collect(run: Components, agent: Agent, states: States, iteration: int) -> list[rollout.Episode]:
    """``rollout_size`` dialogues with the agent's acting rule (sampling; CHAI: its choice), on the
    env's training tasks (``split="train"``: e.g. WebShop's training goals); with
    ``rollout_group_size`` k > 1, ``rollout_size / k`` games each played k times in a row (the same
    seed: the same secret word or city), each sampled with its own key."""
    c = run.config
    k = c.rollout_group_size  # rollouts per game (GRPO's groups): rollout_size / k games, each k times
    seeds = np.repeat(np.random.SeedSequence([c.seed, iteration]).generate_state(c.rollout_size // k), k)
    return _play(run, agent, states, seeds, run.key_for(ROLLOUT, iteration), False, f"rollouts {iteration}")


def evaluate(run: Components, agent: Agent, states: States) -> list[rollout.Episode]:
    """``eval_size`` greedy dialogues (CHAI: its choice among samples), on the same games in every
    evaluation and for every run seed, from the env's evaluation tasks (``split="eval"``: e.g.
    WebShop's evaluation goals; envs without splits play seeds ``EVAL_SEED + i``)."""
    seeds = [EVAL_SEED + i for i in range(run.config.eval_size)]
    return _play(run, agent, states, seeds, run.key_for(EVAL), True, "eval", split="eval")


def store(run: Components, replay: ReplayBuffer, episodes: Sequence[rollout.Episode], first_episode: int) -> int:
    """Adds the episodes' transitions (texts and token rows) to ``replay``; returns how many."""
    rows = run.pipeline.transitions(episodes, first_episode)
    if rows:
        replay.add(**rows)
    return len(rows.get("observation", ()))
