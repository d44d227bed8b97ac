"""The optimizer side of every step: micro-batch gradient averaging, Adam, the non-finite guard
and Polyak averaging, as pure functions of pytrees.

A step computes ``grads`` with :func:`accumulate_gradients`, moves the parameters with
:func:`adam_update` (Adam on gradients clipped by this network's own global norm, see
:func:`archer_jax.learners.train_state.optimizer`), moves a target network with :func:`polyak`,
and hands the result to :func:`keep_if_finite`, which keeps the old state (and counts a skipped
step) when the loss or the gradients are not finite.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from archer_jax.learners.train_state import TrainState

Array = jax.Array

STATS = ("mean", "min", "max", "std")


def split_micro_batches(batch, count: int):
    """``[batch, ...]`` leaves as ``[count, batch // count, ...]``, micro-batch ``j`` holding rows
    ``j, j + count, j + 2·count, ...``. Strided rather than contiguous, so a batch whose rows are
    split over devices in contiguous blocks splits into micro-batches without moving a row between
    devices. The rows of a step are drawn uniformly, so which rows share a micro-batch is immaterial."""

    def split(x):
        if x.shape[0] % count:
            raise ValueError(f"{x.shape[0]} rows do not split into {count} micro-batches")
        return jnp.swapaxes(x.reshape(x.shape[0] // count, count, *x.shape[1:]), 0, 1)

    return jax.tree.map(split, batch)


def accumulate_gradients(loss_fn: Callable, params: nnx.State, batch, micro_batches: int = 1) -> tuple[nnx.State, Array, dict]:
    """Mean gradient and loss of ``loss_fn(params, micro)`` over ``micro_batches`` equal micro-batches
    of ``batch`` (:func:`split_micro_batches`), as one ``lax.scan``; auxiliary outputs come back
    stacked (``[micro_batches, batch // micro_batches, ...]``).

    Equal to one pass over the whole batch, up to float rounding, when ``loss_fn`` is a mean over
    rows (or a sum normalised by a count of the whole batch): the micro-batch layout is a memory
    device (:mod:`archer_jax.learners.micro_batching`), not part of the objective.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    zeros = jax.tree.map(jnp.zeros_like, params)

    def body(total, micro):
        (loss, aux), grads = grad_fn(params, micro)
        return jax.tree.map(jnp.add, total, grads), (loss, aux)

    total, (micro_losses, aux) = jax.lax.scan(body, zeros, split_micro_batches(batch, micro_batches))
    return jax.tree.map(lambda g: g / micro_batches, total), jnp.mean(micro_losses), aux


def adam_update(state: TrainState, tx: optax.GradientTransformation, grads: nnx.State) -> tuple[nnx.State, object]:
    """``(params, opt_state)`` after one step of ``tx`` (clipping + Adam) on ``grads``."""
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state


def polyak(target, online, tau: float | Array):
    """``θ̄ ← (1 - τ) θ̄ + τ θ`` leaf by leaf (τ = 1 copies, τ = 0 keeps)."""
    return jax.tree.map(lambda t, o: ((1.0 - tau) * t + tau * o).astype(t.dtype), target, online)


def keep_if_finite(
    state: TrainState, stepped: TrainState, loss: Array, grads: nnx.State
) -> tuple[TrainState, dict[str, Array]]:
    """``stepped`` if the loss and the gradients' norm are finite, else ``state`` with one more
    ``skipped`` step; with the step's ``grad_norm``, ``skipped`` and ``nonfinite`` metrics."""
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    kept = state._replace(skipped=state.skipped + 1, frozen=None)
    new = jax.tree.map(lambda n, o: jnp.where(finite, n, o), stepped._replace(frozen=None), kept)
    new = new._replace(frozen=stepped.frozen)  # never selected over: it does not change
    return new, {"grad_norm": grad_norm, "skipped": new.skipped, "nonfinite": (~finite).astype(jnp.int32)}


def summarize(name: str, values: Array, mask: Array | None = None) -> dict[str, Array]:
    """``name/mean``, ``name/min``, ``name/max``, ``name/std`` of ``values``: all elements, or
    those where ``mask`` is nonzero (zeros when there are none)."""
    values = values.astype(jnp.float32)
    if mask is None:
        fns = dict(mean=jnp.mean, min=jnp.min, max=jnp.max, std=jnp.std)
        return {f"{name}/{stat}": fns[stat](values) for stat in STATS}
    keep = jnp.broadcast_to(mask, values.shape) != 0
    count = jnp.maximum(jnp.sum(keep), 1).astype(jnp.float32)
    mean = jnp.sum(jnp.where(keep, values, 0.0)) / count
    any_kept = jnp.any(keep)
    stats = dict(mean=mean,
                 min=jnp.where(any_kept, jnp.min(jnp.where(keep, values, jnp.inf)), 0.0),
                 max=jnp.where(any_kept, jnp.max(jnp.where(keep, values, -jnp.inf)), 0.0),
                 std=jnp.sqrt(jnp.sum(jnp.where(keep, (values - mean) ** 2, 0.0)) / count))
    return {f"{name}/{stat}": stats[stat] for stat in STATS}
