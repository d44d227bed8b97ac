"""What every causal LM family shares: the output type, the KV cache, the attention mask and
position ids of a (left-padded) batch over the cache slots, and the pass through the layers.

A causal LM (GPT-2, the Llama family) is called the same way by the sampler and the learners:

* training / scoring: ``model(ids, mask)``
* prefill: ``model(prompt_ids, mask, cache=init_cache(...), cache_index=0)``
* decode:  ``model(next_ids[:, None], mask, cache=cache, cache_index=t)``

where ``mask`` marks every position (or cache slot) that holds a real token. Its config exposes
``vocab_size``, ``hidden_size``, ``num_layers``, ``num_heads``, ``num_kv_heads``, ``head_dim``
and ``max_positions``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.attention import KVCache, SegmentMask
from archer_jax.models.layers import DType, scan_layers

Array = jax.Array


class CausalLMConfig(Protocol):
    vocab_size: int

    @property
    def hidden_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def max_positions(self) -> int: ...


class CausalLMOutput(NamedTuple):
    logits: Array | None  # [batch, len, vocab], float32; None with return_logits=False
    hidden_state: Array  # [batch, len, embed], after the final norm
    cache: tuple[KVCache, ...] | None


def init_cache(config: CausalLMConfig, batch_size: int, num_slots: int, dtype: DType = jnp.float32) -> tuple[KVCache, ...]:
    """An empty KV cache with ``num_slots`` positions (prompt length + new tokens), one
    ``[batch, kv_heads, slots, head_dim]`` key and value per layer."""
    if num_slots > config.max_positions:
        raise ValueError(f"num_slots {num_slots} exceeds the model's {config.max_positions} positions")
    shape = (batch_size, config.num_kv_heads, num_slots, config.head_dim)
    return tuple(KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.num_layers))


class AttentionInputs(NamedTuple):
    positions: Array  # [batch, len] int32: each token's position (real tokens before it)
    valid: Array  # [batch, slots] bool: slots that hold a real token
    query_slots: Array  # [len] int32: the slot of each query
    segments: Array | None = None  # [batch, len] int32 for packed rows: 1, 2, ... per sequence; 0 = padding
    cached: bool = True  # whether the queries attend over cache slots (False: over this call's tokens)

    def mask(self, window: int | None = None) -> Array | SegmentMask:
        """``[batch, 1, len, slots]``: a query may attend to real tokens at or before its slot, and
        with ``window`` only to the last ``window`` slots (sliding-window attention); in packed
        rows only to tokens of its own sequence. Without a cache or a window, the mask comes with
        its segment ids (a :class:`SegmentMask`, real tokens 1 in unpacked rows), for the TPU
        flash kernel."""
        slots = jnp.arange(self.valid.shape[1])[None, :]
        allowed = slots <= self.query_slots[:, None]
        if window is not None:
            allowed &= slots > self.query_slots[:, None] - window
        mask = self.valid[:, None, None, :] & allowed[None, None]
        if self.segments is not None:
            mask &= (self.segments[:, :, None] == self.segments[:, None, :])[:, None]
        if self.cached or window is not None:
            return mask
        segments = self.valid.astype(jnp.int32) if self.segments is None else self.segments
        return SegmentMask(mask, segments, segments, causal=True)


def attention_inputs(
    input_ids: Array,
    attention_mask: Array | None,
    cache: Sequence[KVCache] | None,
    cache_index: Array | int,
    position_ids: Array | None = None,
    segment_ids: Array | None = None,
) -> AttentionInputs:
    """Positions and masks of a call (see the module docstring), with the shape checks.

    Positions are counted from the mask, so each row's first real token has position 0 whatever
    its left padding. Windows count slots; a row's real tokens occupy consecutive slots (left
    padding, then the tokens generated after them), so that is also the distance in positions.
    ``segment_ids`` (packed rows, :mod:`archer_jax.models.packing`; no cache) number the sequences
    of each row, 0 on padding: each attends only within itself, at the given ``position_ids``.
    """
    batch, length = input_ids.shape
    if segment_ids is not None:
        if cache is not None or attention_mask is not None or position_ids is None:
            raise ValueError("segment_ids (packed rows) take position_ids, and neither a cache nor an attention_mask")
        if segment_ids.shape != (batch, length) or position_ids.shape != (batch, length):
            raise ValueError(f"segment_ids {segment_ids.shape} and position_ids {position_ids.shape} must both be "
                             f"{(batch, length)}")
        return AttentionInputs(position_ids, segment_ids > 0, jnp.arange(length), segment_ids, cached=False)
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
    return AttentionInputs(position_ids, valid, cache_index + jnp.arange(length), cached=cache is not None)


def run_layers(
    layers: Sequence[nnx.Module],
    x: Array,
    call: Callable[[Any, Array, KVCache | None], tuple[Array, KVCache | None]],
    cache: Sequence[KVCache] | None,
    remat: str,
) -> tuple[Array, tuple[KVCache, ...] | None]:
    """``x`` through ``call(layer, x, layer_cache)`` for each layer: scanned without a cache
    (training and scoring, :func:`~archer_jax.models.layers.scan_layers`), a Python loop with one
    (decoding steps one token at a time, where stacking the parameters would cost a copy)."""
    if cache is None:
        return scan_layers(layers, x, lambda layer, h: call(layer, h, None)[0], remat=remat), None
    new_cache = []
    for layer, layer_cache in zip(layers, cache):
        x, layer_cache = call(layer, x, layer_cache)
        new_cache.append(layer_cache)
    return x, tuple(new_cache)


def vocabulary_logits(hidden_state: Array, table: Array | None, head: Callable[[Array], Array] | None, dtype: DType) -> Array:
    """Float32 logits from the tied embedding ``table`` (``[vocab, embed]``) or the untied ``head``."""
    if head is None:
        return jnp.einsum("...d,vd->...v", hidden_state, table.astype(dtype), preferred_element_type=jnp.float32)
    return head(hidden_state).astype(jnp.float32)


class CausalLM(nnx.Module):
    """What every causal LM family's forward pass shares: attention inputs (masks, positions,
    cache slots), the layer pass (:func:`run_layers`), the final norm and the vocabulary logits.

    A family sets ``config``, ``dtype``, ``remat`` and ``lm_head`` (None when tied) in its
    ``__init__``, names its parameter attributes in :attr:`PARTS` (kept as in the HF checkpoints,
    so the weight rules read them) and gives :meth:`embed_inputs` and :meth:`layer_call`.
    """

    # The attributes holding the token embedding, the layer list and the final norm.
    PARTS: dict[str, str] = {"embedding": "embed_tokens", "layers": "layers", "norm": "norm"}

    def embed_inputs(self, input_ids: Array, inputs: AttentionInputs) -> Array:
        """The first hidden states of ``input_ids`` (token embeddings, plus positions where learned)."""
        return getattr(self, self.PARTS["embedding"])(input_ids)

    def layer_call(self, inputs: AttentionInputs, cache_index: Array | int) -> Callable:
        """``call(layer, x, layer_cache) -> (x, layer_cache)`` for :func:`run_layers`, with this
        call's masks and positions bound."""
        raise NotImplementedError

    def __call__(
        self,
        input_ids: Array,
        attention_mask: Array | None = None,
        *,
        position_ids: Array | None = None,
        segment_ids: Array | None = None,
        cache: tuple[KVCache, ...] | None = None,
        cache_index: Array | int = 0,
        return_logits: bool = True,
    ) -> CausalLMOutput:
        """Runs the model on ``input_ids`` (``[batch, len]``).

        Args:
          attention_mask: 1 for real tokens, 0 for padding; ``[batch, len]`` without a cache,
            ``[batch, slots]`` with one. Defaults to all ones (no cache only).
          position_ids: defaults to (number of real tokens before each position).
          segment_ids: for rows that pack several sequences (``[batch, len]``: 1, 2, ... per
            sequence, 0 on padding; with ``position_ids``, no ``attention_mask`` and no cache):
            each sequence attends only within itself.
          cache: from :func:`init_cache` or a previous call; the returned output carries the
            updated cache.
          cache_index: the cache slot of ``input_ids[:, 0]``.
          return_logits: False skips the LM head (``logits`` is None); apply :meth:`lm_logits`
            to the hidden states that need it, e.g. the last position when sampling.
        """
        inputs = attention_inputs(input_ids, attention_mask, cache, cache_index, position_ids, segment_ids)
        x = self.embed_inputs(input_ids, inputs)
        x, new_cache = run_layers(getattr(self, self.PARTS["layers"]), x, self.layer_call(inputs, cache_index), cache,
                                  self.remat)
        x = getattr(self, self.PARTS["norm"])(x)
        return CausalLMOutput(self.lm_logits(x) if return_logits else None, x, new_cache)

    def lm_logits(self, hidden_state: Array) -> Array:
        """Float32 vocabulary logits of final hidden states (``[..., embed]`` -> ``[..., vocab]``)."""
        table = getattr(self, self.PARTS["embedding"]).embedding[...]
        return vocabulary_logits(hidden_state, table, self.lm_head, self.dtype)
