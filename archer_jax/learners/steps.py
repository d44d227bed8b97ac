"""One optimizer step of the critic, the actor and behaviour cloning, as pure functions.

Each step takes a :class:`~archer_jax.learners.train_state.TrainState` and a batch whose arrays
have a leading micro-batch axis (``[micro_batches, batch, ...]``). It averages the gradients of
the micro-batches (a ``lax.scan``), clips them by the global norm of this network alone, applies
Adam, and (critic) moves the target network by Polyak averaging, all in one program. A step
whose loss or gradients are not finite changes nothing but the ``skipped`` counter.

:class:`archer_jax.learners.Learner` jits these with explicit shardings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from archer_jax.learners import losses
from archer_jax.learners.critic import Tokens
from archer_jax.learners.train_state import TrainState

Array = jax.Array


class CriticBatch(NamedTuple):
    """Transitions ``(s, a, r, s', terminal)`` and a fresh ``a_π ~ π(·|s)``, critic-tokenized."""

    observation: Tokens
    action: Tokens
    next_observation: Tokens
    pi_action: Tokens
    reward: Array  # float32
    terminal: Array  # 1 = a true terminal state; 0 = continuing or cut by the time limit


class ActorBatch(NamedTuple):
    """Observations with a fresh ``a_π``: policy tokens for log-probs, critic tokens for ``A``."""

    observation: Tokens  # policy tokenizer, left-padded
    action: Tokens  # a_π, policy token ids (stop token included), right-padded
    critic_observation: Tokens
    critic_action: Tokens


class BCBatch(NamedTuple):
    """Observations and the actions to imitate, policy-tokenized."""

    observation: Tokens  # left-padded
    action: Tokens  # right-padded, stop token included


STATS = ("mean", "min", "max", "std")


def summarize(name: str, values: Array) -> dict[str, Array]:
    """``name/mean``, ``name/min``, ``name/max``, ``name/std`` of ``values`` (all elements)."""
    values = values.astype(jnp.float32)
    fns = dict(mean=jnp.mean, min=jnp.min, max=jnp.max, std=jnp.std)
    return {f"{name}/{stat}": fns[stat](values) for stat in STATS}


def _accumulate(loss_fn: Callable, params: nnx.State, batch) -> tuple[nnx.State, Array, dict]:
    """Mean gradient and loss over the micro-batches (leading axis of every batch leaf);
    auxiliary outputs come back stacked per micro-batch."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    zeros = jax.tree.map(jnp.zeros_like, params)

    def body(total, micro):
        (loss, aux), grads = grad_fn(params, micro)
        return jax.tree.map(jnp.add, total, grads), (loss, aux)

    total, (micro_losses, aux) = jax.lax.scan(body, zeros, batch)
    count = jax.tree.leaves(batch)[0].shape[0]
    return jax.tree.map(lambda g: g / count, total), jnp.mean(micro_losses), aux


def _apply(
    state: TrainState, tx: optax.GradientTransformation, grads: nnx.State, loss: Array, tau: float | None
) -> tuple[TrainState, dict[str, Array]]:
    """Adam (+ clipping) on ``grads``; Polyak on the target; skipped whole if anything is not finite."""
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    target = state.target
    if target is not None and tau is not None:
        target = losses.polyak(target, params, tau)
    stepped = TrainState(params, opt_state, target, state.step + 1, state.skipped)
    kept = state._replace(skipped=state.skipped + 1)
    new = jax.tree.map(lambda n, o: jnp.where(finite, n, o), stepped, kept)
    return new, {"grad_norm": grad_norm, "skipped": new.skipped, "nonfinite": (~finite).astype(jnp.int32)}


def critic_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    gamma: float,
    tau: float,
    state: TrainState,
    batch: CriticBatch,
) -> tuple[TrainState, dict[str, Array]]:
    """One critic optimizer step: TD loss with the target critic, then Polyak on the target."""
    target = nnx.merge(graphdef, state.target)

    def loss_fn(params: nnx.State, micro: CriticBatch):
        critic = nnx.merge(graphdef, params)
        online = critic(micro.observation, micro.action)
        next_v1, next_v2 = target.v_values(target.embed(micro.next_observation))
        pi_q1, pi_q2 = target.q_values(target.embed(micro.observation), target.embed(micro.pi_action))
        empty = jnp.zeros_like(next_v1)
        return losses.critic_td_loss(
            online,
            losses.CriticValues(empty, empty, next_v1, next_v2),
            losses.CriticValues(pi_q1, pi_q2, empty, empty),
            micro.reward,
            micro.terminal,
            gamma,
        )

    grads, loss, aux = _accumulate(loss_fn, state.params, batch)
    state, metrics = _apply(state, tx, grads, loss, tau)
    metrics.update(loss=loss, q_loss=jnp.mean(aux["q_loss"]), v_loss=jnp.mean(aux["v_loss"]))
    for name in ("q1", "q2", "v1", "v2", "q_target", "v_target"):
        metrics.update(summarize(name, aux[name]))
    return state, metrics


def actor_step(
    graphdef: nnx.GraphDef,
    critic_graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    loss_name: str,
    state: TrainState,
    critic_params: nnx.State,
    batch: ActorBatch,
) -> tuple[TrainState, dict[str, Array]]:
    """One actor optimizer step on ``A(s, a_π) · Σ_t log π(a_π,t | ...)`` with the online critic's
    advantage (``loss_name``: ``actor_pg`` or ``actor_token_baseline``)."""
    critic = nnx.merge(critic_graphdef, critic_params)
    loss = losses.get_loss(loss_name)

    def loss_fn(params: nnx.State, micro: ActorBatch):
        adv = losses.advantage(critic(micro.critic_observation, micro.critic_action))
        logprobs, baseline = nnx.merge(graphdef, params)(micro.observation, micro.action)
        mask = micro.action.mask.astype(jnp.float32)
        if loss_name == "actor_token_baseline":
            return loss(adv, logprobs, baseline, mask)
        return loss(adv, logprobs, mask)

    grads, value, aux = _accumulate(loss_fn, state.params, batch)
    state, metrics = _apply(state, tx, grads, value, None)
    metrics.update(loss=value, **summarize("advantage", aux["advantage"]), **summarize("action_logprob", aux["action_logprob"]))
    if "baseline_loss" in aux:
        metrics.update(baseline_loss=jnp.mean(aux["baseline_loss"]), policy_loss=jnp.mean(aux["policy_loss"]))
    return state, metrics


def bc_step(
    graphdef: nnx.GraphDef, tx: optax.GradientTransformation, state: TrainState, batch: BCBatch
) -> tuple[TrainState, dict[str, Array]]:
    """One behaviour-cloning (SFT) step: negative log-likelihood of the given actions."""

    def loss_fn(params: nnx.State, micro: BCBatch):
        logprobs, _ = nnx.merge(graphdef, params)(micro.observation, micro.action)
        return losses.bc_nll_loss(logprobs, micro.action.mask.astype(jnp.float32))

    grads, value, aux = _accumulate(loss_fn, state.params, batch)
    state, metrics = _apply(state, tx, grads, value, None)
    tokens = jnp.maximum(jnp.sum(batch.action.mask), 1)
    metrics.update(loss=value, token_nll=-jnp.sum(aux["action_logprob"]) / tokens)
    return state, metrics
