"""ArCHer's estimators: the critic's TD targets and the actor's utterance-level advantage.

Pure functions of the values the networks computed (``[batch]`` per transition), checked against
NumPy re-derivations in ``tests/learners/test_losses.py``. The equations and the conventions are
in ``docs/algorithms.md``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from archer_jax.learners.critic import CriticValues

Array = jax.Array


def td_targets(
    reward: Array, terminal: Array, next_v1: Array, next_v2: Array, gamma: float
) -> tuple[Array, Array]:
    """``r + γ (1 - terminal) V̄_i(s')``: a time-limit truncation (terminal = 0) still bootstraps."""
    keep = gamma * (1.0 - terminal.astype(jnp.float32))
    return reward + keep * next_v1, reward + keep * next_v2


def advantage(values: CriticValues) -> Array:
    """The utterance-level advantage ``min(Q1, Q2)(s, a_π) - min(V1, V2)(s)``, without gradient."""
    return jax.lax.stop_gradient(jnp.minimum(values.q1, values.q2) - jnp.minimum(values.v1, values.v2))
