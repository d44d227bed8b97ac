"""Action and data selection for the CHAI and filtered-BC agents."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def chai_select(target_q1: Array, target_q2: Array) -> Array:
    """CHAI: of k candidate actions per state (``[batch, k]`` target Q-values), the index of the
    one with the highest ``min(Q̄1, Q̄2)``."""
    return jnp.argmax(jnp.minimum(target_q1, target_q2), axis=-1)


def filtered_bc_mask(returns: np.ndarray, fraction: float = 0.1) -> np.ndarray:
    """Online filtered BC: True for the trajectories whose return is in the top ``fraction`` of
    ``returns`` (all collected so far). At least one trajectory is kept; ties at the cut-off are
    all kept."""
    returns = np.asarray(returns, np.float64)
    if returns.ndim != 1 or returns.size == 0:
        raise ValueError(f"returns must be a non-empty 1-D array, got shape {returns.shape}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    keep = max(1, int(np.ceil(fraction * returns.size)))
    cutoff = np.sort(returns)[::-1][keep - 1]
    return returns >= cutoff
