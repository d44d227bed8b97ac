"""Multi-head attention shared by GPT-2 (causal, KV cache) and RoBERTa (bidirectional)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.layers import DType, dense

Array = jax.Array


class KVCache(NamedTuple):
    """Keys and values of one attention layer for every cache slot: ``[batch, slots, heads, head_dim]``."""

    key: Array
    value: Array


def dot_product_attention(q: Array, k: Array, v: Array, mask: Array, scale: float) -> Array:
    """Softmax attention with float32 scores.

    Args:
      q: ``[batch, q_len, heads, head_dim]``.
      k, v: ``[batch, kv_len, heads, head_dim]``.
      mask: boolean, broadcastable to ``[batch, heads, q_len, kv_len]``; True = may attend.
      scale: multiplies the scores.

    A query row with no allowed key (a padding position) gets uniform weights rather than NaN;
    its output is meaningless and callers ignore it.
    """
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


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
        q, k, v = self.query(x), self.key(x), self.value(x)
        if cache is not None:
            k = jax.lax.dynamic_update_slice_in_dim(cache.key, k.astype(cache.key.dtype), cache_index, 1)
            v = jax.lax.dynamic_update_slice_in_dim(cache.value, v.astype(cache.value.dtype), cache_index, 1)
            cache = KVCache(k, v)
            k, v = k.astype(q.dtype), v.astype(q.dtype)
        return self.out(dot_product_attention(q, k, v, mask, scale)), cache
