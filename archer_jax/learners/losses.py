"""ArCHer's losses as pure functions of arrays (DESIGN §1), registered by name.

Every function takes values the networks already computed, so each can be checked against a
NumPy re-derivation and reused by any network. Shapes: ``[batch]`` per transition,
``[batch, tokens]`` per action token with a 0/1 ``mask``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

LOSSES: dict[str, Callable] = {}


def register(name: str) -> Callable[[Callable], Callable]:
    """Adds a loss to :data:`LOSSES` under ``name``."""

    def add(fn: Callable) -> Callable:
        if name in LOSSES:
            raise ValueError(f"loss {name!r} is already registered")
        LOSSES[name] = fn
        return fn

    return add


def get_loss(name: str) -> Callable:
    try:
        return LOSSES[name]
    except KeyError:
        raise KeyError(f"unknown loss {name!r}; registered: {', '.join(sorted(LOSSES))}") from None


class CriticValues(NamedTuple):
    """Both heads of the double critic: ``Q_i(s, a)`` and ``V_i(s)``, each ``[batch]``."""

    q1: Array
    q2: Array
    v1: Array
    v2: Array


def td_targets(
    reward: Array, terminal: Array, next_v1: Array, next_v2: Array, gamma: float
) -> tuple[Array, Array]:
    """``r + γ (1 - terminal) V̄_i(s')``: a time-limit truncation (terminal = 0) still bootstraps."""
    keep = gamma * (1.0 - terminal.astype(jnp.float32))
    return reward + keep * next_v1, reward + keep * next_v2


@register("critic_td")
def critic_td_loss(
    online: CriticValues,
    next_target: CriticValues,
    pi_target: CriticValues,
    reward: Array,
    terminal: Array,
    gamma: float,
) -> tuple[Array, dict[str, Array]]:
    """ArCHer's double-critic loss, ``L_Q + L_V``.

    ``L_Q = Σ_i MSE(Q_i(s, a), r + γ (1 - terminal) V̄_i(s'))`` and
    ``L_V = Σ_i MSE(V_i(s), Q̄_i(s, a_π))``, where ``next_target`` holds the target critic's
    ``V̄_i(s')`` and ``pi_target`` its ``Q̄_i(s, a_π)`` for a fresh policy action ``a_π``.
    Targets carry no gradient.
    """
    q_target1, q_target2 = td_targets(reward, terminal, next_target.v1, next_target.v2, gamma)
    q_target1, q_target2 = jax.lax.stop_gradient((q_target1, q_target2))
    v_target1, v_target2 = jax.lax.stop_gradient((pi_target.q1, pi_target.q2))
    q_loss = jnp.mean((online.q1 - q_target1) ** 2) + jnp.mean((online.q2 - q_target2) ** 2)
    v_loss = jnp.mean((online.v1 - v_target1) ** 2) + jnp.mean((online.v2 - v_target2) ** 2)
    aux = dict(q_loss=q_loss, v_loss=v_loss, q1=online.q1, q2=online.q2, v1=online.v1, v2=online.v2,
               q_target=q_target1, v_target=v_target1)
    return q_loss + v_loss, aux


def advantage(values: CriticValues) -> Array:
    """The utterance-level advantage ``min(Q1, Q2)(s, a_π) - min(V1, V2)(s)``, without gradient."""
    return jax.lax.stop_gradient(jnp.minimum(values.q1, values.q2) - jnp.minimum(values.v1, values.v2))


@register("actor_pg")
def actor_pg_loss(adv: Array, token_logprobs: Array, mask: Array) -> tuple[Array, dict[str, Array]]:
    """``-mean(A · Σ_t log π(a_t | s, a_<t))`` over the batch; the sum runs over action tokens."""
    logprob = jnp.sum(token_logprobs * mask, axis=-1)
    loss = -jnp.mean(jax.lax.stop_gradient(adv) * logprob)
    return loss, dict(advantage=adv, action_logprob=logprob)


@register("actor_token_baseline")
def actor_token_baseline_loss(
    adv: Array, token_logprobs: Array, baseline: Array, mask: Array, baseline_coef: float = 1.0
) -> tuple[Array, dict[str, Array]]:
    """The token-level baseline variant: policy term ``-mean(Σ_t (A - b_t) log π_t)`` plus
    ``baseline_coef · MSE(b_t, A)`` over the action's tokens (``b_t`` = a per-token value head)."""
    adv = jax.lax.stop_gradient(adv)
    centred = adv[:, None] - jax.lax.stop_gradient(baseline)
    policy = -jnp.mean(jnp.sum(centred * token_logprobs * mask, axis=-1))
    tokens = jnp.maximum(jnp.sum(mask), 1.0)
    baseline_mse = jnp.sum(((baseline - adv[:, None]) ** 2) * mask) / tokens
    logprob = jnp.sum(token_logprobs * mask, axis=-1)
    return policy + baseline_coef * baseline_mse, dict(
        advantage=adv, action_logprob=logprob, baseline_loss=baseline_mse, policy_loss=policy
    )


@register("bc_nll")
def bc_nll_loss(token_logprobs: Array, mask: Array) -> tuple[Array, dict[str, Array]]:
    """Behaviour cloning / SFT: ``-mean(Σ_t log π(a_t | s, a_<t))`` over the action's tokens, the
    stop token included (the official code drops it and never learns to end a turn)."""
    logprob = jnp.sum(token_logprobs * mask, axis=-1)
    return -jnp.mean(logprob), dict(action_logprob=logprob)


def polyak(target, online, tau: float | Array):
    """``θ̄ ← (1 - τ) θ̄ + τ θ`` leaf by leaf (τ = 1 copies, τ = 0 keeps)."""
    return jax.tree.map(lambda t, o: ((1.0 - tau) * t + tau * o).astype(t.dtype), target, online)
