"""Behaviour cloning: one optimizer step of the actor on given actions (filtered BC, SFT).

``L = -mean(Σ_t log π(a_t | s, a_<t))`` over the action's tokens, the stop token included
(``docs/algorithms.md``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from archer_jax.learners import losses
from archer_jax.learners.batches import BCBatch
from archer_jax.learners.optimization import accumulate_gradients, adam_update, keep_if_finite
from archer_jax.learners.train_state import TrainState, merged

Array = jax.Array


def bc_step(
    graphdef: nnx.GraphDef, tx: optax.GradientTransformation, state: TrainState, batch: BCBatch, *, micro_batches: int = 1
) -> tuple[TrainState, dict[str, Array]]:
    """One behaviour-cloning (SFT) step: negative log-likelihood of the given actions, over
    ``micro_batches`` scanned micro-batches."""

    def loss_fn(params: nnx.State, b: BCBatch):
        token_logprobs, _ = merged(graphdef, params, state.frozen, state.step)(b.observation, b.action)
        return losses.bc_nll_loss(token_logprobs, b.action.mask.astype(jnp.float32))

    grads, loss, aux = accumulate_gradients(loss_fn, state.params, batch, micro_batches)
    params, opt_state = adam_update(state, tx, grads)
    state, metrics = keep_if_finite(state, state._replace(params=params, opt_state=opt_state, step=state.step + 1), loss, grads)
    tokens = jnp.maximum(jnp.sum(batch.action.mask), 1)
    metrics.update(loss=loss, token_nll=-jnp.sum(aux["action_logprob"]) / tokens)
    return state, metrics
