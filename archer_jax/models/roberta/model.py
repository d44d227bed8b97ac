"""RoBERTa encoder in Flax NNX: post-LN layers and a pooler (dense + tanh on the first token).

Positions follow RoBERTa's padding offset: real tokens are numbered from ``pad_token_id + 1``,
padding sits at ``pad_token_id``. They are derived from the attention mask, so right- and
left-padded batches both give each row the positions it would have alone.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.attention import MultiHeadAttention, SegmentMask
from archer_jax.models.config import HFConfig
from archer_jax.models.layers import DType, activation, check_remat, dense, embedding, layer_norm, scan_layers
from archer_jax.models.packing import segment_mask

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class RobertaConfig(HFConfig):
    """The ``config.json`` fields of a RoBERTa model (defaults = ``roberta-base``)."""

    model_type = "roberta"
    architecture = "RobertaModel"

    vocab_size: int = 50265
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    pad_token_id: int = 1
    bos_token_id: int = 0
    eos_token_id: int = 2

    @property
    def max_length(self) -> int:
        """Longest input: the position table less the padding offset."""
        return self.max_position_embeddings - self.pad_token_id - 1


class EncoderOutput(NamedTuple):
    last_hidden_state: Array  # [batch, len, hidden]
    pooler_output: Array  # [batch, hidden]: tanh(dense(first token))


class RobertaEmbeddings(nnx.Module):
    def __init__(self, config: RobertaConfig, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        kw = dict(init_std=config.initializer_range, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.word = embedding(config.vocab_size, config.hidden_size, ("vocab", "embed"), **kw)
        self.position = embedding(config.max_position_embeddings, config.hidden_size, ("positions", "embed"), **kw)
        self.token_type = embedding(config.type_vocab_size, config.hidden_size, (None, "embed"), **kw)
        self.norm = layer_norm(
            config.hidden_size, epsilon=config.layer_norm_eps, dtype=dtype, param_dtype=param_dtype, rngs=rngs
        )

    def __call__(self, input_ids: Array, position_ids: Array, token_type_ids: Array) -> Array:
        return self.norm(self.word(input_ids) + self.position(position_ids) + self.token_type(token_type_ids))


class RobertaLayer(nnx.Module):
    def __init__(self, config: RobertaConfig, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        kw = dict(init_std=config.initializer_range, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        norm = dict(epsilon=config.layer_norm_eps, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attention = MultiHeadAttention(config.hidden_size, config.num_attention_heads, **kw)
        self.attention_norm = layer_norm(config.hidden_size, **norm)
        self.intermediate = dense(config.hidden_size, config.intermediate_size, ("embed",), ("mlp",), **kw)
        self.output = dense(config.intermediate_size, config.hidden_size, ("mlp",), ("embed",), **kw)
        self.output_norm = layer_norm(config.hidden_size, **norm)
        self.act = activation(config.hidden_act)
        self.scale = (config.hidden_size // config.num_attention_heads) ** -0.5

    def __call__(self, x: Array, mask: Array) -> Array:
        h, _ = self.attention(x, mask, scale=self.scale)
        x = self.attention_norm(x + h)
        return self.output_norm(x + self.output(self.act(self.intermediate(x))))


class RobertaModel(nnx.Module):
    """RoBERTa encoder + pooler; parameters in ``param_dtype``, compute in ``dtype``; ``remat``
    names the layers' activation checkpointing (``layers.REMAT_POLICIES``)."""

    def __init__(
        self,
        config: RobertaConfig,
        *,
        dtype: DType = jnp.float32,
        param_dtype: DType = jnp.float32,
        remat: str = "none",
        rngs: nnx.Rngs,
    ):
        self.config = config
        self.remat = check_remat(remat)
        self.embeddings = RobertaEmbeddings(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.layers = nnx.List(
            [RobertaLayer(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs) for _ in range(config.num_hidden_layers)]
        )
        self.pooler = dense(
            config.hidden_size,
            config.hidden_size,
            ("embed",),
            ("embed",),
            init_std=config.initializer_range,
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )

    def __call__(
        self,
        input_ids: Array,
        attention_mask: Array | None = None,
        *,
        token_type_ids: Array | None = None,
        position_ids: Array | None = None,
        segment_ids: Array | None = None,
    ) -> EncoderOutput:
        """Encodes ``input_ids`` (``[batch, len]``); ``attention_mask`` is 1 for real tokens.
        ``segment_ids`` (in place of the mask): packed rows (:mod:`archer_jax.models.packing`),
        each token attending only within its sequence and numbered from its sequence's start; the
        pooler output is then the first sequence's of each row (pool the sequences' first tokens
        of ``last_hidden_state`` with :meth:`pool`)."""
        if segment_ids is not None:
            valid = segment_ids > 0
            mask = SegmentMask(segment_mask(segment_ids), segment_ids, segment_ids)
            if position_ids is None:
                raise ValueError("packed rows need position_ids: each sequence's own (models.packing.pack's positions)")
            position_ids = jnp.where(valid, position_ids + self.config.pad_token_id + 1, self.config.pad_token_id)
        else:
            if attention_mask is None:
                attention_mask = jnp.ones_like(input_ids)
            valid = attention_mask.astype(bool)
            if position_ids is None:
                position_ids = jnp.cumsum(valid, axis=-1, dtype=jnp.int32) * valid + self.config.pad_token_id
            segments = valid.astype(jnp.int32)
            mask = SegmentMask(valid[:, None, None, :], segments, segments)
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        x = self.embeddings(input_ids, position_ids, token_type_ids)
        # A Python loop over the layers (min_layers above their count): for this post-LN stack it was
        # faster than a scan (layers.scan_layers).
        x = scan_layers(self.layers, x, lambda layer, h: layer(h, mask), min_layers=len(self.layers) + 1, remat=self.remat)
        return EncoderOutput(x, self.pool(x[:, 0]))

    def pool(self, first: Array) -> Array:
        """The pooler (dense + tanh) on first-token hidden states ``[..., hidden]``."""
        return jnp.tanh(self.pooler(first))
