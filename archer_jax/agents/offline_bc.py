"""Offline BC and offline filtered BC (OfflineArcher's baselines): behaviour cloning on a fixed
dataset of dialogues, all of it (``offline_bc``) or the transitions of its episodes whose return
is in the top ``filtered_bc_fraction`` (``offline_filtered_bc``; OfflineArcher keeps the top 10%).
The BC steps are online filtered BC's (:func:`archer_jax.agents.filtered_bc.bc_updates`) on the
dataset instead of the replay buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from archer_jax.agents.agent import Agent, sample_actions, timed
from archer_jax.agents.filtered_bc import bc_updates
from archer_jax.learners.train_state import States

if TYPE_CHECKING:
    from archer_jax.components import Components
    from archer_jax.data.offline_replay import OfflineReplay


def _learner(fraction: float | None):
    def learn(run: Components, states: States, data: OfflineReplay, iteration: int) -> tuple[States, dict[str, float]]:
        """``bc_steps`` BC steps on the dataset (its best episodes' transitions when filtering)."""
        keep = run.config.filtered_bc_fraction if fraction is None else fraction
        states, seconds = timed(bc_updates, run, states, data, keep)
        return states, {"critic": 0.0, "actor": seconds}

    return learn


BC = Agent("offline_bc", act=sample_actions, learn=_learner(1.0), needs_critic=False, offline=True)
FILTERED_BC = Agent("offline_filtered_bc", act=sample_actions, learn=_learner(None), needs_critic=False, offline=True)
