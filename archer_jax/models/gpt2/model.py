"""GPT-2 causal LM in Flax NNX: pre-LN blocks, tied LM head, KV cache for generation.

Batches may be left-padded: position ids come from the attention mask, so each row's first
real token has position 0 whatever its padding.

Generation drives the cache as every causal LM does (:mod:`archer_jax.models.causal_lm`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.attention import KVCache, MultiHeadAttention
from archer_jax.models.causal_lm import AttentionInputs, CausalLM
from archer_jax.models.config import HFConfig
from archer_jax.models.layers import DType, activation, check_remat, dense, embedding, layer_norm

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

    # The names every causal LM config answers to (archer_jax.models.causal_lm).
    hidden_size = property(lambda self: self.n_embd)
    num_layers = property(lambda self: self.n_layer)
    num_heads = property(lambda self: self.n_head)
    num_kv_heads = property(lambda self: self.n_head)
    max_positions = property(lambda self: self.n_positions)


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


class GPT2LMHeadModel(CausalLM):
    """GPT-2 with its language-model head; parameters in ``param_dtype``, compute in ``dtype``;
    ``remat`` names the blocks' activation checkpointing (``layers.REMAT_POLICIES``). The forward
    pass is :class:`~archer_jax.models.causal_lm.CausalLM`'s."""

    PARTS = {"embedding": "wte", "layers": "h", "norm": "ln_f"}

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

    def embed_inputs(self, input_ids: Array, inputs: AttentionInputs) -> Array:
        return self.wte(input_ids) + self.wpe(inputs.positions)  # learned positions

    def layer_call(self, inputs: AttentionInputs, cache_index: Array | int):
        mask = inputs.mask()
        return lambda block, h, c: block(h, mask, c, cache_index)
