"""ArCHer's losses as pure functions of arrays (``docs/algorithms.md``).

Every function takes values the networks already computed, so each can be checked against a
NumPy re-derivation and reused by any network. Shapes: ``[batch]`` per transition,
``[batch, tokens]`` per action token with a 0/1 ``mask``. The actor losses a config can name are
listed, with one signature, in :mod:`archer_jax.learners.actor_losses`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from archer_jax.learners.critic import CriticValues

Array = jax.Array


def critic_loss(
    online: CriticValues, q_targets: tuple[Array, Array], v_targets: tuple[Array, Array]
) -> tuple[Array, dict[str, Array]]:
    """ArCHer's double-critic loss, ``L_Q + L_V``.

    ``L_Q = Σ_i MSE(Q_i(s, a), y_i)`` with the TD targets ``y_i = r + γ (1 - terminal) V̄_i(s')``
    (:func:`~archer_jax.learners.archer.td_targets`), and ``L_V = Σ_i MSE(V_i(s), Q̄_i(s, a_π))``
    for a fresh policy action ``a_π``. Targets carry no gradient.
    """
    q_target1, q_target2 = jax.lax.stop_gradient(q_targets)
    v_target1, v_target2 = jax.lax.stop_gradient(v_targets)
    q_loss = jnp.mean((online.q1 - q_target1) ** 2) + jnp.mean((online.q2 - q_target2) ** 2)
    v_loss = jnp.mean((online.v1 - v_target1) ** 2) + jnp.mean((online.v2 - v_target2) ** 2)
    aux = dict(q_loss=q_loss, v_loss=v_loss, q1=online.q1, q2=online.q2, v1=online.v1, v2=online.v2,
               q_target=q_target1, v_target=v_target1)
    return q_loss + v_loss, aux


def expectile_loss(diff: Array, expectile: float) -> Array:
    """IQL's asymmetric square ``mean(|τ - 1[diff < 0]| · diff²)`` of ``diff = target - prediction``:
    τ = 0.5 is half the MSE (the mean); τ > 0.5 weighs under-estimates more (an upper expectile)."""
    weight = jnp.where(diff > 0, expectile, 1.0 - expectile)
    return jnp.mean(weight * diff**2)


def iql_critic_loss(
    online: CriticValues, q_targets: tuple[Array, Array], v_targets: tuple[Array, Array], expectile: float
) -> tuple[Array, dict[str, Array]]:
    """Offline ArCHer's (IQL's) double-critic loss, ``L_Q + L_V``.

    ``L_Q = Σ_i MSE(Q_i(s, a), y_i)`` with ``y_i = r + γ (1 - terminal) V̄_i(s')``, as online; but
    ``L_V = Σ_i expectile_τ(v_target_i - V_i(s))``, the targets being the target critic's
    ``Q̄(s, a)`` of the *dataset's* action (no policy sample): V is an upper expectile of Q over
    the behaviour data, and τ = 0.5 gives the SARSA-style mean. Targets carry no gradient.
    """
    q_target1, q_target2 = jax.lax.stop_gradient(q_targets)
    v_target1, v_target2 = jax.lax.stop_gradient(v_targets)
    q_loss = jnp.mean((online.q1 - q_target1) ** 2) + jnp.mean((online.q2 - q_target2) ** 2)
    v_loss = expectile_loss(v_target1 - online.v1, expectile) + expectile_loss(v_target2 - online.v2, expectile)
    aux = dict(q_loss=q_loss, v_loss=v_loss, q1=online.q1, q2=online.q2, v1=online.v1, v2=online.v2,
               q_target=q_target1, v_target=v_target1)
    return q_loss + v_loss, aux


def actor_pg_loss(adv: Array, token_logprobs: Array, mask: Array) -> tuple[Array, dict[str, Array]]:
    """``-mean(A · Σ_t log π(a_t | s, a_<t))`` over the batch; the sum runs over action tokens."""
    logprob = jnp.sum(token_logprobs * mask, axis=-1)
    loss = -jnp.mean(jax.lax.stop_gradient(adv) * logprob)
    return loss, dict(advantage=adv, action_logprob=logprob)


def actor_token_baseline_loss(
    adv: Array,
    token_logprobs: Array,
    baseline: Array,
    mask: Array,
    baseline_coef: float = 1.0,
    token_count: Array | float | None = None,
) -> tuple[Array, dict[str, Array]]:
    """The token-level baseline variant: policy term ``-mean(Σ_t (A - b_t) log π_t)`` plus
    ``baseline_coef · MSE(b_t, A)`` over the action's tokens (``b_t`` = a per-token value head).
    The MSE's sum is divided by ``token_count`` (default: the tokens in ``mask``); a step split into
    micro-batches passes its tokens per micro-batch, so the mean runs over the step's tokens."""
    adv = jax.lax.stop_gradient(adv)
    centred = adv[:, None] - jax.lax.stop_gradient(baseline)
    policy = -jnp.mean(jnp.sum(centred * token_logprobs * mask, axis=-1))
    tokens = jnp.maximum(jnp.sum(mask), 1.0) if token_count is None else token_count
    baseline_mse = jnp.sum(((baseline - adv[:, None]) ** 2) * mask) / tokens
    logprob = jnp.sum(token_logprobs * mask, axis=-1)
    return policy + baseline_coef * baseline_mse, dict(
        advantage=adv, action_logprob=logprob, baseline_loss=baseline_mse, policy_loss=policy
    )


def awr_loss(adv: Array, token_logprobs: Array, mask: Array, beta: float = 1.0, clip: float = 100.0
             ) -> tuple[Array, dict[str, Array]]:
    """Advantage-weighted regression on the dataset's actions:
    ``-mean(w · Σ_t log π(a_t | s, a_<t))`` with ``w = min(exp(β A), clip)`` (no gradient), the sum
    over the action's tokens, stop token included. OfflineArcher's actor (its ``inv_temp`` is β; it
    does not clip, which lets one large advantage swamp a batch)."""
    weight = jax.lax.stop_gradient(jnp.minimum(jnp.exp(beta * adv), clip))
    logprob = jnp.sum(token_logprobs * mask, axis=-1)
    return -jnp.mean(weight * logprob), dict(advantage=adv, action_logprob=logprob, awr_weight=weight)


def bc_nll_loss(token_logprobs: Array, mask: Array) -> tuple[Array, dict[str, Array]]:
    """Behaviour cloning / SFT: ``-mean(Σ_t log π(a_t | s, a_<t))`` over the action's tokens, the
    stop token included (the official code drops it and never learns to end a turn)."""
    logprob = jnp.sum(token_logprobs * mask, axis=-1)
    return -jnp.mean(logprob), dict(action_logprob=logprob)
