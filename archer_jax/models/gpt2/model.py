"""GPT-2 causal LM in Flax NNX: pre-LN blocks, tied LM head, KV cache for generation.

Batches may be left-padded: position ids come from the attention mask, so each row's first
real token has position 0 whatever its padding.

Generation drives the cache in two kinds of calls (see :func:`init_cache`):

* prefill: ``model(prompt_ids, mask, cache=cache, cache_index=0)``
* decode:  ``model(next_ids[:, None], mask, cache=cache, cache_index=t)``

where ``mask`` (``[batch, slots]``) marks every cache slot that holds a real token, including
the ones this call writes.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.attention import KVCache, MultiHeadAttention
from archer_jax.models.config import HFConfig
from archer_jax.models.layers import DType, activation, check_remat, dense, embedding, layer_norm, scan_layers

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class GPT2Config(HFConfig):
    """The ``config.json`` fields of a GPT-2 model (Hugging Face defaults = ``gpt2``, 124M)."""

    model_type = "gpt2"
    architecture = "GPT2LMHeadModel"

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_new"
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | None = 50256
    pad_token_id: int | None = None

    @property
    def mlp_dim(self) -> int:
        return self.n_inner or 4 * self.n_embd

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class CausalLMOutput(NamedTuple):
    logits: Array | None  # [batch, len, vocab], float32; None with return_logits=False
    hidden_state: Array  # [batch, len, embed], after the final LayerNorm
    cache: tuple[KVCache, ...] | None


def init_cache(
    config: GPT2Config, batch_size: int, num_slots: int, dtype: DType = jnp.float32
) -> tuple[KVCache, ...]:
    """An empty KV cache with ``num_slots`` positions (prompt length + new tokens)."""
    if num_slots > config.n_positions:
        raise ValueError(f"num_slots {num_slots} exceeds the model's n_positions {config.n_positions}")
    shape = (batch_size, config.n_head, num_slots, config.head_dim)
    return tuple(KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.n_layer))


class GPT2MLP(nnx.Module):
    def __init__(self, config: GPT2Config, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        kw = dict(init_std=config.initializer_range, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc = dense(config.n_embd, config.mlp_dim, ("embed",), ("mlp",), **kw)
        self.proj = dense(config.mlp_dim, config.n_embd, ("mlp",), ("embed",), **kw)
        self.act = activation(config.activation_function)

    def __call__(self, x: Array) -> Array:
        return self.proj(self.act(self.fc(x)))


class GPT2Block(nnx.Module):
    def __init__(
        self, config: GPT2Config, layer_idx: int, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs
    ):
        norm = dict(epsilon=config.layer_norm_epsilon, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.ln_1 = layer_norm(config.n_embd, **norm)
        self.attn = MultiHeadAttention(
            config.n_embd,
            config.n_head,
            init_std=config.initializer_range,
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.ln_2 = layer_norm(config.n_embd, **norm)
        self.mlp = GPT2MLP(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        scale = config.head_dim**-0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            scale /= layer_idx + 1
        self.scale = scale

    def __call__(
        self, x: Array, mask: Array, cache: KVCache | None, cache_index: Array | int
    ) -> tuple[Array, KVCache | None]:
        h, cache = self.attn(self.ln_1(x), mask, scale=self.scale, cache=cache, cache_index=cache_index)
        x = x + h
        return x + self.mlp(self.ln_2(x)), cache


class GPT2LMHeadModel(nnx.Module):
    """GPT-2 with its language-model head; parameters in ``param_dtype``, compute in ``dtype``;
    ``remat`` names the blocks' activation checkpointing (``layers.REMAT_POLICIES``)."""

    def __init__(
        self,
        config: GPT2Config,
        *,
        dtype: DType = jnp.float32,
        param_dtype: DType = jnp.float32,
        remat: str = "none",
        rngs: nnx.Rngs,
    ):
        self.config = config
        self.dtype = dtype
        self.remat = check_remat(remat)  # activation checkpointing of the blocks in training passes
        kw = dict(init_std=config.initializer_range, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.wte = embedding(config.vocab_size, config.n_embd, ("vocab", "embed"), **kw)
        self.wpe = embedding(config.n_positions, config.n_embd, ("positions", "embed"), **kw)
        self.h = nnx.List(
            [GPT2Block(config, i, dtype=dtype, param_dtype=param_dtype, rngs=rngs) for i in range(config.n_layer)]
        )
        self.ln_f = layer_norm(
            config.n_embd, epsilon=config.layer_norm_epsilon, dtype=dtype, param_dtype=param_dtype, rngs=rngs
        )
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else dense(config.n_embd, config.vocab_size, ("embed",), ("vocab",), use_bias=False, **kw)
        )

    def __call__(
        self,
        input_ids: Array,
        attention_mask: Array | None = None,
        *,
        position_ids: Array | None = None,
        cache: tuple[KVCache, ...] | None = None,
        cache_index: Array | int = 0,
        return_logits: bool = True,
    ) -> CausalLMOutput:
        """Runs the model on ``input_ids`` (``[batch, len]``).

        Args:
          attention_mask: 1 for real tokens, 0 for padding; ``[batch, len]`` without a cache,
            ``[batch, slots]`` with one. Defaults to all ones (no cache only).
          position_ids: defaults to (number of real tokens before each position).
          cache: from :func:`init_cache` or a previous call; the returned output carries the
            updated cache.
          cache_index: the cache slot of ``input_ids[:, 0]``.
          return_logits: False skips the LM head (``logits`` is None); apply :meth:`lm_logits`
            to the hidden states that need it, e.g. the last position when sampling.
        """
        batch, length = input_ids.shape
        slots = length if cache is None else cache[0].key.shape[2]
        if attention_mask is None:
            if cache is not None:
                raise ValueError("attention_mask over the cache slots is required with a cache")
            attention_mask = jnp.ones((batch, length), jnp.int32)
        if attention_mask.shape != (batch, slots):
            raise ValueError(f"attention_mask has shape {attention_mask.shape}, expected {(batch, slots)}")
        valid = attention_mask.astype(bool)
        if position_ids is None:
            all_positions = jnp.maximum(jnp.cumsum(valid, axis=-1, dtype=jnp.int32) - 1, 0)
            position_ids = jax.lax.dynamic_slice_in_dim(all_positions, cache_index, length, axis=1)
        query_slots = cache_index + jnp.arange(length)
        causal = jnp.arange(slots)[None, :] <= query_slots[:, None]
        mask = (valid[:, None, None, :] & causal[None, None]).astype(bool)  # [batch, 1, len, slots]

        x = self.wte(input_ids) + self.wpe(position_ids)
        new_cache = None
        if cache is None:
            x = scan_layers(self.h, x, lambda block, h: block(h, mask, None, 0)[0], remat=self.remat)
        else:
            new_cache = []
            for block, layer_cache in zip(self.h, cache):
                x, layer_cache = block(x, mask, layer_cache, cache_index)
                new_cache.append(layer_cache)
            new_cache = tuple(new_cache)
        x = self.ln_f(x)
        logits = self.lm_logits(x) if return_logits else None
        return CausalLMOutput(logits, x, new_cache)

    def lm_logits(self, hidden_state: Array) -> Array:
        """Float32 vocabulary logits of final hidden states (``[..., embed]`` -> ``[..., vocab]``)."""
        if self.lm_head is None:
            table = self.wte.embedding[...].astype(self.dtype)
            return jnp.einsum("...d,vd->...v", hidden_state, table, preferred_element_type=jnp.float32)
        return self.lm_head(hidden_state).astype(jnp.float32)
