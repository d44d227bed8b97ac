"""ArCHer's two updates (Zhou et al. 2024, Algorithm 1), one optimizer step each, as pure functions.

    critic:  y_i = r + γ (1 - terminal) V̄_i(s')             TD target from the target critic
             L = Σ_i MSE(Q_i(s, a), y_i) + Σ_i MSE(V_i(s), Q̄_i(s, a_π)),   a_π ~ π(·|s) fresh
             θ ← Adam(∇L);  θ̄ ← (1 - τ) θ̄ + τ θ
    actor:   A = min_i Q_i(s, a_π) - min_i V_i(s)             online critic, no gradient
             L = -mean(A · Σ_t log q(a_π,t | s, a_π,<t))      (or another registered actor loss)
             q: π's distribution that a_π was sampled from (temperature, top-k, top-p)

Batches carry a leading micro-batch axis; the gradients are averaged over it. CHAI trains its
critic with the same :func:`critic_step`. :meth:`archer_jax.learners.networks.Networks.compile_step`
jits these with explicit shardings. The equations and our conventions are in ``docs/algorithms.md``.

ArCHer's estimators, :func:`td_targets` (the critic's) and :func:`advantage` (the actor's
utterance-level one), are pure functions of the values the networks computed (``[batch]`` per
transition), checked against NumPy re-derivations in ``tests/learners/test_losses.py``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from archer_jax.learners import actor_losses, losses
from archer_jax.learners.batches import ActorBatch, CriticBatch
from archer_jax.learners.critic import CriticValues
from archer_jax.learners.packed_batches import PackedActorBatch, PackedCriticBatch
from archer_jax.learners.optimization import (accumulate_gradients, adam_update, keep_if_finite, polyak,
                                             split_micro_batches, summarize)
from archer_jax.learners.train_state import TrainState, merged
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.models.tokenizer import Tokens

Array = jax.Array


def td_targets(
    reward: Array, terminal: Array, next_v1: Array, next_v2: Array, gamma: float
) -> tuple[Array, Array]:
    """``r + γ (1 - terminal) V̄_i(s')``: ``r`` alone where the game ended (a win, or a turn limit that
    ends the game); a cut where the game goes on (terminal = 0: a crashed worker, a limit that only
    cuts) bootstraps."""
    keep = gamma * (1.0 - terminal.astype(jnp.float32))
    return reward + keep * next_v1, reward + keep * next_v2


def advantage(values: CriticValues) -> Array:
    """The utterance-level advantage ``min(Q1, Q2)(s, a_π) - min(V1, V2)(s)``, without gradient."""
    return jax.lax.stop_gradient(jnp.minimum(values.q1, values.q2) - jnp.minimum(values.v1, values.v2))


def embed_both(critic, first: Tokens, second: Tokens) -> tuple[Array, Array]:
    """The critic's embeddings of two token batches of one length bucket, in one encoder pass.
    Their rows are interleaved (row i of each side by side), not stacked: with the batch split
    over devices each device then holds both halves of its own rows, and no rows move between
    devices (stacking, then splitting, took an all-to-all and a collective-permute)."""
    def interleaved(a: Array, b: Array) -> Array:
        return jnp.stack([a, b], axis=1).reshape(2 * a.shape[0], *a.shape[1:])

    both = Tokens(interleaved(first.ids, second.ids), interleaved(first.mask, second.mask))
    e = critic.embed(both).reshape(first.ids.shape[0], 2, -1)
    return e[:, 0], e[:, 1]


def utterance_q(graphdef: nnx.GraphDef, params: nnx.State, observation: Tokens, action: Tokens) -> Array:
    """``min(Q1, Q2)(s, a)`` of the double critic with ``params``: the high level's value of an utterance."""
    values = nnx.merge(graphdef, params)(observation, action)
    return jnp.minimum(values.q1, values.q2)


def utterance_advantage(graphdef: nnx.GraphDef, params: nnx.State, observation: Tokens, action: Tokens) -> Array:
    """``min(Q1, Q2)(s, a) - min(V1, V2)(s)`` of the double critic with ``params``: ArCHer's
    utterance-level advantage of ``a`` in ``s``."""
    return advantage(nnx.merge(graphdef, params)(observation, action))


def split(e: Array, parts: int) -> list[Array]:
    """Packed embeddings ``[groups, parts * n, d]`` (each group's sequences: ``parts`` runs of
    ``n``) as ``parts`` arrays ``[groups * n, d]``, group by group."""
    n = e.shape[1] // parts
    return [e[:, i * n:(i + 1) * n].reshape(-1, e.shape[-1]) for i in range(parts)]


def packed_advantage(critic, packed) -> Array:
    """:func:`advantage` of a packed ``(s, a)`` batch (each group's s, then its a): ``[groups * n]``."""
    e_s, e_a = split(critic.embed_groups(packed), 2)
    return advantage(CriticValues(*critic.q_values(e_s, e_a), *critic.v_values(e_s)))


def critic_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    gamma: float,
    tau: float,
    state: TrainState,
    batch: CriticBatch,
    *,
    micro_batches: int = 1,
) -> tuple[TrainState, dict[str, Array]]:
    """One critic step: TD targets from the target critic, Adam, then Polyak on the target. The
    batch (``[batch, ...]`` leaves) is taken in ``micro_batches`` scanned micro-batches."""
    target = nnx.merge(graphdef, state.target)

    def loss_fn(params: nnx.State, b: CriticBatch):
        online = nnx.merge(graphdef, params)(b.observation, b.action)  # Q_i(s, a), V_i(s)
        e_s, e_next = embed_both(target, b.observation, b.next_observation)  # ē(s), ē(s'): one encoder pass
        q_targets = td_targets(b.reward, b.terminal, *target.v_values(e_next), gamma)  # r + γ(1-done) V̄_i(s')
        v_targets = target.q_values(e_s, target.embed(b.pi_action))  # Q̄_i(s, a_π)
        return losses.critic_loss(online, q_targets, v_targets)

    return critic_update(tx, tau, state, batch, loss_fn, micro_batches)


def packed_critic_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    gamma: float,
    tau: float,
    state: TrainState,
    batch: PackedCriticBatch,
    *,
    micro_batches: int = 1,
) -> tuple[TrainState, dict[str, Array]]:
    """:func:`critic_step` on a packed batch (:mod:`archer_jax.learners.packed_batches`): the same
    loss, with each encoder's sequences packed several to a row; micro-batches are whole groups."""
    target = nnx.merge(graphdef, state.target)

    def loss_fn(params: nnx.State, b: PackedCriticBatch):
        critic = nnx.merge(graphdef, params)
        e_s, e_a = split(critic.embed_groups(b.online), 2)  # e(s), e(a)
        online = CriticValues(*critic.q_values(e_s, e_a), *critic.v_values(e_s))  # Q_i(s, a), V_i(s)
        t_s, t_next, t_pi = split(target.embed_groups(b.target), 3)  # ē(s), ē(s'), ē(a_π)
        q_targets = td_targets(b.reward.reshape(-1), b.terminal.reshape(-1), *target.v_values(t_next), gamma)
        v_targets = target.q_values(t_s, t_pi)  # Q̄_i(s, a_π)
        return losses.critic_loss(online, q_targets, v_targets)

    return critic_update(tx, tau, state, batch, loss_fn, micro_batches)


def critic_update(tx: optax.GradientTransformation, tau: float, state: TrainState, batch, loss_fn,
                  micro_batches: int) -> tuple[TrainState, dict[str, Array]]:
    """What every double-critic step shares once its loss is given: gradients over the scanned
    micro-batches, Adam, Polyak on the target, the non-finite guard and the metrics.
    ``loss_fn(params, micro_batch) -> (loss, aux)`` with :func:`~archer_jax.learners.losses.critic_loss`'s aux."""
    grads, loss, aux = accumulate_gradients(loss_fn, state.params, batch, micro_batches)
    params, opt_state = adam_update(state, tx, grads)
    target_params = polyak(state.target, params, tau)
    state, metrics = keep_if_finite(state, TrainState(params, opt_state, target_params, state.step + 1, state.skipped),
                                    loss, grads)
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
    *,
    micro_batches: int = 1,
    loss_options: tuple[tuple[str, float], ...] = (),
    distribution: TokenDistribution = TokenDistribution(),
    center_advantage: bool = False,
) -> tuple[TrainState, dict[str, Array]]:
    """One actor step on the advantage of the batch's action (ArCHer: a fresh ``a_π``; offline
    ArCHer: the dataset's) under the online critic (unchanged here), with the registered actor loss
    ``loss_name`` and its ``loss_options`` (``(name, value)`` pairs), over ``micro_batches``
    scanned micro-batches. Log-probs are taken under ``distribution``: the one the actions were
    sampled from (a policy gradient on samples of ``q`` scored under another distribution moves
    the policy even where the advantage is constant). ``center_advantage``: each row's advantage
    less the mean over the step's whole batch (not each micro-batch's)."""
    def score(module, b: ActorBatch) -> tuple[Array, Array | None, Array]:
        return (*module(b.observation, b.action, distribution), b.action.mask)

    return policy_gradient_step(graphdef, critic_graphdef, tx, loss_name, state, critic_params, batch, micro_batches,
                                loss_options, center_advantage,
                                lambda critic, b: advantage(critic(b.critic_observation, b.critic_action)), score)


def packed_actor_step(
    graphdef: nnx.GraphDef,
    critic_graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    loss_name: str,
    state: TrainState,
    critic_params: nnx.State,
    batch: PackedActorBatch,
    *,
    micro_batches: int = 1,
    loss_options: tuple[tuple[str, float], ...] = (),
    distribution: TokenDistribution = TokenDistribution(),
    center_advantage: bool = False,
) -> tuple[TrainState, dict[str, Array]]:
    """:func:`actor_step` on a packed batch (:class:`~archer_jax.learners.packed_batches.PackedActorBatch`):
    the same loss, with the policy's ``s + a_π`` and the critic's s and a_π packed several to a
    row; micro-batches are whole groups."""
    def score(module, b: PackedActorBatch) -> tuple[Array, Array | None, Array]:
        action = Tokens(*(x.reshape(-1, x.shape[-1]) for x in b.action))
        return (*module.packed(b.policy, b.prompt_length, action, distribution), action.mask)

    return policy_gradient_step(graphdef, critic_graphdef, tx, loss_name, state, critic_params, batch, micro_batches,
                                loss_options, center_advantage, lambda critic, b: packed_advantage(critic, b.critic), score)


def policy_gradient_step(graphdef: nnx.GraphDef, critic_graphdef: nnx.GraphDef, tx: optax.GradientTransformation,
                         loss_name: str, state: TrainState, critic_params: nnx.State, batch, micro_batches: int,
                         loss_options: tuple[tuple[str, float], ...], center_advantage: bool, advantage_of,
                         score) -> tuple[TrainState, dict[str, Array]]:
    """What the padded and packed actor steps share once their layout is given:
    ``advantage_of(critic, micro_batch)`` (``[transitions]``, no gradient) and
    ``score(actor, micro_batch) -> (token log-probs, baseline or None, action mask)``."""
    critic = nnx.merge(critic_graphdef, critic_params)
    actor_loss = actor_losses.get_actor_loss(loss_name)
    options = dict(loss_options)
    # Token means are normalised by the step's tokens, not each micro-batch's own: the same loss
    # whatever the layout.
    token_count = jnp.maximum(jnp.sum(batch.action.mask).astype(jnp.float32), 1.0) / micro_batches
    mean_advantage = 0.0
    if center_advantage:  # over the step's batch, a micro-batch at a time (the critic pass again in the loss)
        sums = jax.lax.map(lambda b: jnp.sum(advantage_of(critic, b)), split_micro_batches(batch, micro_batches))
        mean_advantage = jnp.sum(sums) / math.prod(batch.action.mask.shape[:-1])

    def loss_fn(params: nnx.State, b):
        adv = advantage_of(critic, b) - mean_advantage  # min Q(s, a_π) - min V(s)
        token_logprobs, baseline, mask = score(merged(graphdef, params, state.frozen, state.step), b)
        return actor_loss(actor_losses.PolicyTerms(adv, token_logprobs, mask.astype(jnp.float32), baseline,
                                                   token_count), **options)

    return actor_update(tx, state, batch, loss_fn, micro_batches)


def actor_update(tx: optax.GradientTransformation, state: TrainState, batch, loss_fn,
                 micro_batches: int) -> tuple[TrainState, dict[str, Array]]:
    """What every actor step shares once its loss is given: gradients over the scanned
    micro-batches, Adam, the non-finite guard and the metrics."""
    grads, loss, aux = accumulate_gradients(loss_fn, state.params, batch, micro_batches)
    params, opt_state = adam_update(state, tx, grads)
    state, metrics = keep_if_finite(state, state._replace(params=params, opt_state=opt_state, step=state.step + 1), loss, grads)
    action_tokens = jnp.sum(batch.action.mask, axis=-1).reshape(-1)
    metrics.update(loss=loss, **summarize("advantage", aux["advantage"]), **summarize("action_logprob", aux["action_logprob"]),
                   **summarize("action_tokens", action_tokens))
    metrics.update({k: jnp.mean(v) for k, v in aux.items() if k not in ("advantage", "action_logprob")})
    return state, metrics
