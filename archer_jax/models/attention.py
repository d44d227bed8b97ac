"""Multi-head attention shared by GPT-2 (causal, KV cache) and RoBERTa (bidirectional)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.layers import DType, dense

Array = jax.Array


class KVCache(NamedTuple):
    """Keys and values of one attention layer for every cache slot: ``[batch, heads, slots, head_dim]``
    (head-major, the layout the attention dots read, so a decode step copies no cache)."""

    key: Array
    value: Array


def dot_product_attention(q: Array, k: Array, v: Array, mask: Array, scale: float) -> Array:
    """Softmax attention with float32 scores, on head-major arrays.

    Args:
      q: ``[batch, heads, q_len, head_dim]``.
      k, v: ``[batch, heads, kv_len, head_dim]``.
      mask: boolean, broadcastable to ``[batch, heads, q_len, kv_len]``; True = may attend.
      scale: multiplies the scores.

    Returns ``[batch, heads, q_len, head_dim]``. A query row with no allowed key (a padding
    position) gets uniform weights rather than NaN; its output is meaningless and callers ignore it.
    Head-major operands make both dots plain batched matrix products; with the heads inside the
    batch axes XLA:CPU transposed every operand, a third of the attention's time.
    """
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, v)


class MultiHeadAttention(nnx.Module):
    """Separate query/key/value/output projections over ``(heads, head_dim)``."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        init_std: float,
        dtype: DType,
        param_dtype: DType,
        rngs: nnx.Rngs,
    ):
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        heads = (num_heads, self.head_dim)
        kw = dict(init_std=init_std, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.query = dense(embed_dim, heads, ("embed",), ("heads", "kv"), **kw)
        self.key = dense(embed_dim, heads, ("embed",), ("heads", "kv"), **kw)
        self.value = dense(embed_dim, heads, ("embed",), ("heads", "kv"), **kw)
        self.out = dense(heads, embed_dim, ("heads", "kv"), ("embed",), **kw)

    def __call__(
        self,
        x: Array,
        mask: Array,
        *,
        scale: float,
        cache: KVCache | None = None,
        cache_index: Array | int = 0,
    ) -> tuple[Array, KVCache | None]:
        """Attends from ``x`` (``[batch, len, embed]``) to itself, or to the cache.

        With ``cache``, this call's keys/values are written into slots
        ``[cache_index, cache_index + len)`` and the queries attend over all slots; ``mask`` then
        has the cache's slot count as its last dimension. Returns the output and the new cache.
        """
        q, k, v = (jnp.swapaxes(p(x), 1, 2) for p in (self.query, self.key, self.value))  # [b, h, len, d]
        if cache is not None:
            k = jax.lax.dynamic_update_slice_in_dim(cache.key, k.astype(cache.key.dtype), cache_index, 2)
            v = jax.lax.dynamic_update_slice_in_dim(cache.value, v.astype(cache.value.dtype), cache_index, 2)
            cache = KVCache(k, v)
            k, v = k.astype(q.dtype), v.astype(q.dtype)
        return self.out(jnp.swapaxes(dot_product_attention(q, k, v, mask, scale), 1, 2)), cache
