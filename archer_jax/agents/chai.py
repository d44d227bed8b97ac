"""CHAI (Verma et al. 2022), online: ArCHer's critic, and a frozen policy steered by it.

Acting: ``chai_samples`` utterances sampled from the frozen policy per state, the one with the
highest ``min(Q̄1, Q̄2)`` under the target critic is taken (:meth:`archer_jax.acting.Acting.chai`).
Learning: ArCHer's critic steps, whose ``a_π`` is CHAI's own choice. The policy never changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax

from archer_jax.agents.agent import Agent, timed
from archer_jax.agents.archer import critic_updates
from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer

if TYPE_CHECKING:
    from archer_jax.components import Components


def chai_actions(run: Components, states: States, observations: Sequence[str], key: jax.Array, greedy: bool = False,
                 rows: Sequence[int] | None = None) -> list[str]:
    """CHAI's choice among samples (the same rule in evaluation: ``greedy`` is not used)."""
    return run.acting.chai(run.policy(states), states.critic.target, observations, key, rows=rows).texts


def chai_pi_actions(run: Components, states: States, sample: dict, key: jax.Array) -> list[str]:
    """CHAI's ``a_π`` for the critic's V-target: its own choice for each replayed observation."""
    return run.acting.chai_texts(run.policy(states), states.critic.target, sample["observation"], key)


def learn(run: Components, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
    """``critic_steps`` critic steps; the policy is frozen."""
    states, seconds = timed(critic_updates, run, states, replay, iteration, chai_pi_actions)
    return states, {"critic": seconds, "actor": 0.0}


AGENT = Agent("chai", act=chai_actions, learn=learn)
