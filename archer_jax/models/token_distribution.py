"""The distribution a policy's next token is drawn from: its logits at a temperature, cut to the
top-k and the nucleus (top-p), renormalised. The sampler draws from it, and every
policy-gradient learner scores the sampled tokens under it (``E_q[∇ log q] = 0`` holds for the
distribution ``q`` that drew them, not for the untempered model).

    dist = TokenDistribution(temperature=0.7, top_p=0.9)
    x = filter_logits(logits, dist)                   # -inf outside top-k / top-p
    logprobs = token_logprobs(logits, ids, dist)      # log q(ids), the nucleus renormalised
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

Array = jax.Array

_BISECTION_STEPS = 40  # halvings of the logit range: far below float32 spacing


@dataclasses.dataclass(frozen=True)
class TokenDistribution:
    """``softmax(logits / temperature)`` cut to the ``top_k`` most likely tokens (0: off) and then
    to the smallest set whose probability reaches ``top_p`` (1: off), renormalised."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def is_model(self) -> bool:
        """Whether this is the model's own distribution (temperature 1, no cut)."""
        return self.temperature == 1.0 and not self.top_k and self.top_p >= 1.0

    @property
    def cuts(self) -> bool:
        """Whether top-k or top-p removes tokens."""
        return bool(self.top_k) or self.top_p < 1.0


def _threshold(x: Array, keep_above: Callable[[Array], Array]) -> Array:
    """The largest ``t`` (per row, ``[..., 1]``) with ``keep_above(t)`` true, by bisection over the
    row's finite logit range. ``keep_above`` must be true at the row minimum and monotone.

    Sorting a 50k vocabulary per step is slow on CPUs (and ``lax.top_k`` sorts there); a fixed
    number of masked reductions costs about the same everywhere.
    """
    finite = jnp.isfinite(x)
    lo = jnp.min(jnp.where(finite, x, jnp.inf), axis=-1, keepdims=True)
    hi = jnp.max(x, axis=-1, keepdims=True)
    hi = hi + jnp.maximum(jnp.abs(hi), 1.0) * 1e-6  # keep_above(hi) is false: nothing above hi

    def halve(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        ok = keep_above(mid)
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo, _ = jax.lax.fori_loop(0, _BISECTION_STEPS, halve, (lo, hi))
    return lo


def kept(x: Array, dist: TokenDistribution) -> Array:
    """Where ``x`` (logits already divided by the temperature, ``[..., vocab]``) survives top-k,
    then top-p. Ties at a boundary are kept, so a filter may keep slightly more tokens."""
    keep = jnp.ones(x.shape, bool)
    if dist.top_k and dist.top_k < x.shape[-1]:
        k = dist.top_k
        kth = _threshold(x, lambda t: jnp.sum(x >= t, axis=-1, keepdims=True) >= k)
        keep = x >= kth
        x = jnp.where(keep, x, -jnp.inf)
    if dist.top_p < 1.0:
        probs = jax.nn.softmax(x, axis=-1)
        top_p = dist.top_p
        cut = _threshold(x, lambda t: jnp.sum(jnp.where(x >= t, probs, 0.0), axis=-1, keepdims=True) >= top_p)
        keep = keep & (x >= cut)
    return keep


def filter_logits(logits: Array, dist: TokenDistribution) -> Array:
    """``logits / temperature`` (float32) with everything outside top-k / top-p set to ``-inf``:
    top-k keeps the tokens at or above the k-th largest logit; top-p then keeps the smallest set
    of most likely tokens whose probability reaches ``top_p``."""
    x = logits.astype(jnp.float32) / dist.temperature
    if not dist.cuts:
        return x
    return jnp.where(kept(x, dist), x, -jnp.inf)


def token_logprobs(logits: Array, ids: Array, dist: TokenDistribution) -> Array:
    """``log q(ids)`` under ``dist`` (``logits`` ``[..., vocab]``, ``ids`` ``[...]``): the model's
    own ``log_softmax`` when ``dist`` is the model's, else the tempered logits' over the kept set.

    The kept set always holds the scored token: the learner's logits may round differently from the
    sampler's (another program), and after an update (PPO's later epochs) a sampled token may fall
    outside the new nucleus; it is then scored as if just inside it, never as ``-inf``. The set is
    a constant of the logits (its gradient is zero almost everywhere), so the gradient is that of
    the renormalised distribution over it, whose expectation under ``q`` is zero.
    """
    ids = ids.astype(jnp.int32)[..., None]
    if dist.is_model:
        return jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), ids, -1)[..., 0]
    x = logits.astype(jnp.float32) / dist.temperature
    if not dist.cuts:
        return jnp.take_along_axis(jax.nn.log_softmax(x, axis=-1), ids, -1)[..., 0]
    keep = kept(jax.lax.stop_gradient(x), dist)
    x_id = jnp.take_along_axis(x, ids, -1)[..., 0]
    total = jax.nn.logsumexp(jnp.where(keep, x, -jnp.inf), axis=-1)
    inside = jnp.take_along_axis(keep, ids, -1)[..., 0]
    return x_id - jnp.where(inside, total, jnp.logaddexp(total, x_id))
