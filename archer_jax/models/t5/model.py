"""T5 encoder-decoder in Flax NNX: T5 v1.0 (ReLU feed-forward, tied and rescaled LM head) and
T5 v1.1 / flan-t5 (gated-GELU, untied LM head), read from their ``config.json``.

Pre-norm RMS layers without biases; unscaled attention scores plus relative position biases
(learned per bucket and head, one table per stack, shared by its layers); the decoder's
self-attention caches keys and values, and its cross-attention keys and values are computed once
per encoder output (:meth:`T5ForConditionalGeneration.cross_kv`). Encoder inputs are padded on
the right, as T5's tokenizer does: positions are the token indices, as in Hugging Face.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.attention import KVCache, MultiHeadAttention
from archer_jax.models.config import HFConfig
from archer_jax.models.layers import DType, activation, check_remat, dense, embedding, rms_norm, scan_layers

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class T5Config(HFConfig):
    """The ``config.json`` fields of a T5 model (defaults = Hugging Face's ``T5Config``).

    ``tie_word_embeddings`` False gives an LM head of its own. transformers 4 wrote it False for
    flan-t5 and T5 v1.1 (own head, unscaled) and True for T5 v1.0 (the embedding as the head,
    decoder output scaled by ``d_model ** -0.5``); transformers 5 writes ``tie_word_embeddings:
    true`` for every T5, records the scaling in ``scale_decoder_outputs`` and keeps a head of its
    own in the weights file. The loader therefore decides the head from the weights
    (:func:`archer_jax.models.t5.weights.fit_to_tensors`) and the scaling from
    :func:`scales_decoder_output`.
    """

    model_type = "t5"
    architecture = "T5ForConditionalGeneration"

    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 6
    num_decoder_layers: int | None = None
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    initializer_factor: float = 1.0
    feed_forward_proj: str = "relu"
    tie_word_embeddings: bool = True
    scale_decoder_outputs: bool | None = None
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0

    def __post_init__(self) -> None:
        kind = self.feed_forward_proj.split("-")
        if len(kind) > 2 or (len(kind) == 2 and kind[0] != "gated"):
            raise ValueError(f"feed_forward_proj {self.feed_forward_proj!r} is not 'ACT' or 'gated-ACT'")
        activation(self.activation)  # a ValueError naming the known ones

    @classmethod
    def from_hf_dict(cls, config: dict[str, Any]) -> "T5Config":
        """Reads ``config.json``; ``eos_token_id`` may be a list there (the first is used)."""
        config = dict(config)
        if isinstance(config.get("eos_token_id"), list):
            config["eos_token_id"] = config["eos_token_id"][0]
        for key in ("pad_token_id", "decoder_start_token_id"):
            if config.get(key) is None:
                config.pop(key, None)
        config["scale_decoder_outputs"] = scales_decoder_output(config)
        if config.get("tie_word_embeddings") is None:
            config.pop("tie_word_embeddings", None)
        return super().from_hf_dict(config)

    def to_hf_dict(self) -> dict[str, Any]:
        out = super().to_hf_dict()
        if out["scale_decoder_outputs"] is None:
            del out["scale_decoder_outputs"]
        return out

    @property
    def gated(self) -> bool:
        return self.feed_forward_proj.startswith("gated-")

    @property
    def activation(self) -> str:
        """Hugging Face's name of the feed-forward activation ("gated-gelu" means the tanh GELU)."""
        return "gelu_new" if self.feed_forward_proj == "gated-gelu" else self.feed_forward_proj.split("-")[-1]

    @property
    def decoder_layers(self) -> int:
        return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers

    @property
    def scales_output(self) -> bool:
        return self.tie_word_embeddings if self.scale_decoder_outputs is None else self.scale_decoder_outputs


def scales_decoder_output(hf_config: dict[str, Any]) -> bool:
    """Whether a T5 ``config.json`` scales the decoder output by ``d_model ** -0.5``, read as
    transformers 5 reads it: ``scale_decoder_outputs`` when given, else unless
    ``tie_word_embeddings`` is false (transformers 4's rule: an untied head is not scaled)."""
    if hf_config.get("scale_decoder_outputs") is not None:
        return bool(hf_config["scale_decoder_outputs"])
    return hf_config.get("tie_word_embeddings") is not False


def relative_position_bucket(relative: Array, *, bidirectional: bool, num_buckets: int, max_distance: int) -> Array:
    """T5's bucket of each relative position (key position - query position): exact buckets for
    short distances, logarithmic ones up to ``max_distance``; the bidirectional encoder spends half
    the buckets on keys after the query, the causal decoder counts only keys before it."""
    buckets = jnp.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).astype(relative.dtype) * num_buckets
        distance = jnp.abs(relative)
    else:
        distance = -jnp.minimum(relative, 0)
    max_exact = num_buckets // 2
    scaled = jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / max_exact) / math.log(max_distance / max_exact)
    large = jnp.minimum(max_exact + (scaled * (num_buckets - max_exact)).astype(relative.dtype), num_buckets - 1)
    return buckets + jnp.where(distance < max_exact, distance, large)


class T5FeedForward(nnx.Module):
    """``wo(act(wi(x)))``, or the gated ``wo(act(wi_0(x)) * wi_1(x))``."""

    def __init__(self, config: T5Config, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        f = config.initializer_factor
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=False)
        inward = dict(init_std=f * config.d_model**-0.5, **kw)
        if config.gated:
            self.wi_0 = dense(config.d_model, config.d_ff, ("embed",), ("mlp",), **inward)
            self.wi_1 = dense(config.d_model, config.d_ff, ("embed",), ("mlp",), **inward)
        else:
            self.wi = dense(config.d_model, config.d_ff, ("embed",), ("mlp",), **inward)
        self.wo = dense(config.d_ff, config.d_model, ("mlp",), ("embed",), init_std=f * config.d_ff**-0.5, **kw)
        self.act = activation(config.activation)
        self.gated = config.gated

    def __call__(self, x: Array) -> Array:
        h = self.act(self.wi_0(x)) * self.wi_1(x) if self.gated else self.act(self.wi(x))
        return self.wo(h)


class T5Block(nnx.Module):
    """Self-attention, (decoder) cross-attention and the feed-forward, each pre-normed and residual."""

    def __init__(self, config: T5Config, *, decoder: bool, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        norm = dict(epsilon=config.layer_norm_epsilon, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        attention = dict(num_kv_heads=config.num_heads, head_dim=config.d_kv, qkv_bias=False, out_bias=False,
                         init_std=config.initializer_factor * config.d_model**-0.5, dtype=dtype,
                         param_dtype=param_dtype, rngs=rngs)
        self.self_norm = rms_norm(config.d_model, **norm)
        self.self_attention = MultiHeadAttention(config.d_model, config.num_heads, **attention)
        if decoder:
            self.cross_norm = rms_norm(config.d_model, **norm)
            self.cross_attention = MultiHeadAttention(config.d_model, config.num_heads, **attention)
        self.ff_norm = rms_norm(config.d_model, **norm)
        self.ff = T5FeedForward(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(
        self,
        x: Array,
        mask: Array,
        bias: Array,
        *,
        cache: KVCache | None = None,
        cache_index: Array | int = 0,
        context: KVCache | None = None,
        context_mask: Array | None = None,
    ) -> tuple[Array, KVCache | None]:
        h, cache = self.self_attention(self.self_norm(x), mask, scale=1.0, bias=bias, cache=cache, cache_index=cache_index)
        x = x + h
        if context is not None:
            x = x + self.cross_attention(self.cross_norm(x), context_mask, scale=1.0, context=context)[0]
        return x + self.ff(self.ff_norm(x)), cache


class T5Stack(nnx.Module):
    """The encoder (bidirectional) or the decoder (causal, with cross-attention): blocks, one
    relative position bias table, and the final RMS norm."""

    def __init__(self, config: T5Config, *, decoder: bool, dtype: DType, param_dtype: DType, remat: str, rngs: nnx.Rngs):
        self.config = config
        self.decoder = decoder
        self.remat = remat
        count = config.decoder_layers if decoder else config.num_layers
        self.blocks = nnx.List(
            [T5Block(config, decoder=decoder, dtype=dtype, param_dtype=param_dtype, rngs=rngs) for _ in range(count)]
        )
        self.relative_attention_bias = embedding(
            config.relative_attention_num_buckets, config.num_heads, (None, "heads"),
            init_std=config.initializer_factor * config.d_model**-0.5, dtype=jnp.float32, param_dtype=param_dtype,
            rngs=rngs,
        )
        self.final_norm = rms_norm(config.d_model, epsilon=config.layer_norm_epsilon, dtype=dtype,
                                   param_dtype=param_dtype, rngs=rngs)

    def position_bias(self, query_positions: Array, key_positions: Array) -> Array:
        """``[1, heads, queries, keys]`` float32 biases of each query/key position pair."""
        buckets = relative_position_bucket(
            key_positions[None, :] - query_positions[:, None], bidirectional=not self.decoder,
            num_buckets=self.config.relative_attention_num_buckets,
            max_distance=self.config.relative_attention_max_distance,
        )
        return jnp.transpose(self.relative_attention_bias(buckets), (2, 0, 1))[None]

    def __call__(
        self,
        x: Array,
        mask: Array,
        bias: Array,
        *,
        cache: tuple[KVCache, ...] | None = None,
        cache_index: Array | int = 0,
        context: tuple[KVCache, ...] | None = None,
        context_mask: Array | None = None,
    ) -> tuple[Array, tuple[KVCache, ...] | None]:
        """The blocks (scanned without a cache, a Python loop with one) and the final norm."""
        if cache is None:
            if context is None:
                call = lambda block, h: block(h, mask, bias)[0]  # noqa: E731
                x = scan_layers(self.blocks, x, call, remat=self.remat)
            else:
                for block, kv in zip(self.blocks, context):
                    x = block(x, mask, bias, context=kv, context_mask=context_mask)[0]
            return self.final_norm(x), None
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(x, mask, bias, cache=cache[i], cache_index=cache_index,
                                   context=None if context is None else context[i], context_mask=context_mask)
            new_cache.append(layer_cache)
        return self.final_norm(x), tuple(new_cache)


class T5ForConditionalGeneration(nnx.Module):
    """T5 with its LM head.

    * training / scoring: ``model(input_ids, attention_mask, decoder_input_ids).logits``
    * decoding: ``encoded = model.encode(ids, mask)``, ``context = model.cross_kv(encoded)``,
      ``cache = model.init_cache(batch, slots)``, then ``model.decode(token[:, None], mask,
      context, cache=cache, cache_index=t)`` per step (``models.t5.generate.greedy``).
    """

    def __init__(
        self,
        config: T5Config,
        *,
        dtype: DType = jnp.float32,
        param_dtype: DType = jnp.float32,
        remat: str = "none",
        rngs: nnx.Rngs,
    ):
        self.config = config
        self.dtype = dtype
        self.remat = check_remat(remat)
        self.shared = embedding(config.vocab_size, config.d_model, ("vocab", "embed"),
                                init_std=config.initializer_factor, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        stack = dict(dtype=dtype, param_dtype=param_dtype, remat=self.remat, rngs=rngs)
        self.encoder = T5Stack(config, decoder=False, **stack)
        self.decoder = T5Stack(config, decoder=True, **stack)
        self.lm_head = None if config.tie_word_embeddings else dense(
            config.d_model, config.vocab_size, ("embed",), ("vocab",), use_bias=False,
            init_std=config.initializer_factor, dtype=dtype, param_dtype=param_dtype, rngs=rngs,
        )

    def encode(self, input_ids: Array, attention_mask: Array | None = None) -> Array:
        """``[batch, len, d_model]`` encoder states of right-padded ``input_ids`` (mask: 1 = token)."""
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)
        positions = jnp.arange(input_ids.shape[1])
        bias = self.encoder.position_bias(positions, positions)
        return self.encoder(self.shared(input_ids), attention_mask.astype(bool)[:, None, None, :], bias)[0]

    def cross_kv(self, encoded: Array) -> tuple[KVCache, ...]:
        """Each decoder block's cross-attention keys and values of the encoder states."""
        return tuple(block.cross_attention.context_kv(encoded) for block in self.decoder.blocks)

    def init_cache(self, batch_size: int, num_slots: int, dtype: DType = jnp.float32) -> tuple[KVCache, ...]:
        """An empty decoder self-attention cache of ``num_slots`` positions."""
        shape = (batch_size, self.config.num_heads, num_slots, self.config.d_kv)
        return tuple(KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in self.decoder.blocks)

    def decode(
        self,
        decoder_input_ids: Array,
        attention_mask: Array,
        context: tuple[KVCache, ...],
        *,
        decoder_attention_mask: Array | None = None,
        cache: tuple[KVCache, ...] | None = None,
        cache_index: Array | int = 0,
    ) -> tuple[Array, tuple[KVCache, ...] | None]:
        """Float32 logits ``[batch, len, vocab]`` of ``decoder_input_ids`` (and the new cache).

        ``attention_mask`` is the encoder's (1 = token), ``context`` from :meth:`cross_kv`. With
        ``cache`` the inputs fill slots ``[cache_index, cache_index + len)`` and attend to every
        slot up to their own; ``decoder_attention_mask`` (no cache only) marks real decoder tokens.
        """
        length = decoder_input_ids.shape[1]
        queries = cache_index + jnp.arange(length)
        slots = length if cache is None else cache[0].key.shape[2]
        keys = jnp.arange(slots)
        mask = (keys[None, :] <= queries[:, None])[None, None]
        if decoder_attention_mask is not None:
            mask = mask & decoder_attention_mask.astype(bool)[:, None, None, :]
        bias = self.decoder.position_bias(queries, keys)
        x, cache = self.decoder(self.shared(decoder_input_ids), mask, bias, cache=cache, cache_index=cache_index,
                                context=context, context_mask=attention_mask.astype(bool)[:, None, None, :])
        if self.config.scales_output:
            x = x * self.config.d_model**-0.5
        if self.lm_head is None:
            table = self.shared.embedding[...].astype(self.dtype)
            return jnp.einsum("...d,vd->...v", x, table, preferred_element_type=jnp.float32), cache
        return self.lm_head(x).astype(jnp.float32), cache

    def __call__(
        self,
        input_ids: Array,
        attention_mask: Array | None = None,
        decoder_input_ids: Array | None = None,
        decoder_attention_mask: Array | None = None,
    ) -> Array:
        """Float32 logits ``[batch, decoder_len, vocab]`` (teacher forcing)."""
        if decoder_input_ids is None:
            raise ValueError("decoder_input_ids are required")
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)
        context = self.cross_kv(self.encode(input_ids, attention_mask))
        return self.decode(decoder_input_ids, attention_mask, context, decoder_attention_mask=decoder_attention_mask)[0]
