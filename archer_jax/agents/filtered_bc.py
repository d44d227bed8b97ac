"""Online filtered behaviour cloning: imitate the best trajectories collected so far.

Each iteration keeps the trajectories whose return is in the top ``filtered_bc_fraction`` of all
in the buffer (:func:`archer_jax.learners.selection.filtered_bc_mask`) and takes ``bc_steps``
behaviour-cloning steps on uniform batches of their transitions. No critic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from archer_jax.agents.agent import Agent, sample_actions, timed
from archer_jax.learners.batches import bc_batch
from archer_jax.learners.selection import filtered_bc_mask
from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer

if TYPE_CHECKING:
    from archer_jax.components import Components


def learn(run: Components, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
    """``bc_steps`` BC steps on the transitions of the best trajectories in the buffer."""
    states, seconds = timed(bc_updates, run, states, replay, run.config.filtered_bc_fraction)
    return states, {"critic": 0.0, "actor": seconds}


def best_positions(replay: ReplayBuffer, fraction: float) -> np.ndarray:
    """The positions of the transitions of ``replay``'s episodes whose return is in the top
    ``fraction`` (all of them for 1.0)."""
    episode = replay.columns["episode"][: len(replay)]
    if fraction >= 1.0:
        return np.arange(len(replay))
    returns = replay.columns["episode_return"][: len(replay)]
    numbers, first = np.unique(episode, return_index=True)
    keep = numbers[filtered_bc_mask(returns[first], fraction)]
    return np.flatnonzero(np.isin(episode, keep))


def bc_updates(run: Components, states: States, replay: ReplayBuffer, fraction: float) -> States:
    """The BC steps of one iteration on the transitions of the top ``fraction`` of episodes."""
    c, pipeline = run.config, run.pipeline
    positions = best_positions(replay, fraction)
    actor = states.actor
    for _ in range(c.bc_steps):
        sample = replay.sample_from(positions, run.batch)
        batch = bc_batch(
            pipeline.policy_tokenizer, sample["policy_observation"], sample["policy_action"],
            max_length=pipeline.max_prompt_length,
            max_action_length=pipeline.max_action_length, min_action_bucket=pipeline.action_bucket,
        )
        actor, metrics = run.learner.bc_step(actor, batch)
        run.watchdog.add("bc", metrics)
    return States(actor, states.critic)


AGENT = Agent("filtered_bc", act=sample_actions, learn=learn, needs_critic=False)
