"""The Llama decoder family in Flax NNX: Llama 2/3, Mistral and Qwen2 from their ``config.json``.

Pre-norm decoder layers with RMSNorm, rotary positions (:mod:`archer_jax.models.rope`, with Llama 3's
rescaling), grouped-query attention (the shared :class:`~archer_jax.models.attention.MultiHeadAttention`),
a SwiGLU MLP, tied or untied embeddings, sliding-window attention where the config sets it
(Mistral's ``sliding_window``; Qwen2's ``use_sliding_window`` / ``layer_types``), and Qwen2's
query/key/value biases. Batches, masks, positions and the KV cache work as for every causal LM
(:mod:`archer_jax.models.causal_lm`), so the sampler and the learners take these models unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax.models.attention import KVCache, MultiHeadAttention
from archer_jax.models.causal_lm import AttentionInputs, CausalLM
from archer_jax.models.config import HFConfig
from archer_jax.models.layers import DType, activation, check_remat, dense, embedding, rms_norm
from archer_jax.models.rope import RopeScaling, apply_rotary, inverse_frequencies

Array = jax.Array


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@dataclasses.dataclass(frozen=True)
class LlamaConfig(HFConfig):
    """The ``config.json`` fields of a Llama-family model (Hugging Face's ``LlamaConfig`` defaults).

    ``head_dim`` and ``num_key_value_heads`` default to ``hidden_size // num_attention_heads`` and
    ``num_attention_heads``. ``rope_theta``/``rope_scaling`` are read from either the hub's keys
    (``rope_theta``, ``rope_scaling``) or transformers 5's ``rope_parameters``. ``layer_types``
    names each layer's attention (``full_attention`` / ``sliding_attention``); when absent it is
    derived from the family's sliding-window fields.
    """

    model_type: ClassVar[str] = "llama"
    architecture: ClassVar[str] = "LlamaForCausalLM"

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = RopeScaling()
    attention_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    bos_token_id: int | tuple[int, ...] | None = 1
    eos_token_id: int | tuple[int, ...] | None = 2
    pad_token_id: int | None = None

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)
        if self.num_key_value_heads is None:
            set_("num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None:
            set_("head_dim", self.hidden_size // self.num_attention_heads)
        if self.layer_types is None:
            set_("layer_types", self.default_layer_types())
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_hidden_layers} layers")
        unknown = set(self.layer_types) - {"full_attention", "sliding_attention"}
        if unknown:
            raise ValueError(f"layer_types {sorted(unknown)} are not supported (full_attention, sliding_attention)")
        if "sliding_attention" in self.layer_types and not self.sliding_window:
            raise ValueError("layer_types has sliding_attention layers but sliding_window is not set")

    def default_layer_types(self) -> tuple[str, ...]:
        """Every layer windowed when ``sliding_window`` is set (Mistral's rule), else none."""
        kind = "sliding_attention" if self.sliding_window else "full_attention"
        return (kind,) * self.num_hidden_layers

    @classmethod
    def from_hf_dict(cls, config: dict[str, Any]) -> "LlamaConfig":
        config = {k: _hashable(v) for k, v in config.items()}
        rope = config.get("rope_parameters") or {}
        if isinstance(rope, dict) and rope:
            config.setdefault("rope_theta", rope.get("rope_theta", cls.rope_theta))
        config["rope_scaling"] = RopeScaling.from_hf(config.get("rope_scaling") or rope or None)
        return super().from_hf_dict(config)

    def to_hf_dict(self) -> dict[str, Any]:
        out = super().to_hf_dict()
        scaling = self.rope_scaling.to_hf()
        out["rope_scaling"] = scaling
        out["rope_parameters"] = {"rope_theta": self.rope_theta, **(scaling or {"rope_type": "default"})}
        if self.layer_types != self.default_layer_types() or "max_window_layers" in out:
            out["layer_types"] = list(self.layer_types)  # Qwen2 writes its own; the others only when set
        else:
            out.pop("layer_types")
        return out

    # The names every causal LM config answers to (archer_jax.models.causal_lm).
    num_layers = property(lambda self: self.num_hidden_layers)
    num_heads = property(lambda self: self.num_attention_heads)
    num_kv_heads = property(lambda self: self.num_key_value_heads)
    max_positions = property(lambda self: self.max_position_embeddings)

    def window(self, layer: int) -> int | None:
        """Layer ``layer``'s attention window in tokens (None: the whole context)."""
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else None


@dataclasses.dataclass(frozen=True)
class MistralConfig(LlamaConfig):
    """Mistral: a Llama with (optionally) sliding-window attention in every layer."""

    model_type: ClassVar[str] = "mistral"
    architecture: ClassVar[str] = "MistralForCausalLM"

    vocab_size: int = 32000
    intermediate_size: int = 14336
    num_key_value_heads: int | None = 8
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    sliding_window: int | None = 4096


@dataclasses.dataclass(frozen=True)
class Qwen2Config(LlamaConfig):
    """Qwen2: a Llama with query/key/value biases; sliding windows only with ``use_sliding_window``,
    in the layers from ``max_window_layers`` on."""

    model_type: ClassVar[str] = "qwen2"
    architecture: ClassVar[str] = "Qwen2ForCausalLM"

    vocab_size: int = 151936
    intermediate_size: int = 22016
    max_position_embeddings: int = 32768
    attention_bias: bool = True
    use_sliding_window: bool = False
    max_window_layers: int = 28
    bos_token_id: int | tuple[int, ...] | None = None
    eos_token_id: int | tuple[int, ...] | None = None

    def default_layer_types(self) -> tuple[str, ...]:
        windowed = self.use_sliding_window and self.sliding_window
        return tuple(
            "sliding_attention" if windowed and i >= self.max_window_layers else "full_attention"
            for i in range(self.num_hidden_layers)
        )


class LlamaMLP(nnx.Module):
    """SwiGLU: ``down(act(gate(x)) * up(x))``."""

    def __init__(self, config: LlamaConfig, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        kw = dict(init_std=config.initializer_range, dtype=dtype, param_dtype=param_dtype, rngs=rngs, use_bias=config.mlp_bias)
        e, m = config.hidden_size, config.intermediate_size
        self.gate_proj = dense(e, m, ("embed",), ("mlp",), **kw)
        self.up_proj = dense(e, m, ("embed",), ("mlp",), **kw)
        self.down_proj = dense(m, e, ("mlp",), ("embed",), **kw)
        self.act = activation(config.hidden_act)

    def __call__(self, x: Array) -> Array:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nnx.Module):
    def __init__(self, config: LlamaConfig, layer_idx: int, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        norm = dict(epsilon=config.rms_norm_eps, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.input_layernorm = rms_norm(config.hidden_size, **norm)
        self.self_attn = MultiHeadAttention(
            config.hidden_size,
            config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=config.head_dim,
            qkv_bias=config.attention_bias,
            out_bias=False,
            init_std=config.initializer_range,
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.post_attention_layernorm = rms_norm(config.hidden_size, **norm)
        self.mlp = LlamaMLP(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.scale = config.head_dim**-0.5
        self.windowed = config.window(layer_idx) is not None

    def __call__(self, x: Array, masks: tuple[Array, Array], rotary, cache: KVCache | None, cache_index) -> tuple[Array, KVCache | None]:
        mask = masks[1] if self.windowed else masks[0]
        h, cache = self.self_attn(
            self.input_layernorm(x), mask, scale=self.scale, cache=cache, cache_index=cache_index, rotary=rotary
        )
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), cache


class LlamaForCausalLM(CausalLM):
    """A Llama-family causal LM; parameters in ``param_dtype``, compute in ``dtype``; ``remat``
    names the layers' activation checkpointing (``layers.REMAT_POLICIES``)."""

    def __init__(
        self,
        config: LlamaConfig,
        *,
        dtype: DType = jnp.float32,
        param_dtype: DType = jnp.float32,
        remat: str = "none",
        rngs: nnx.Rngs,
    ):
        self.config = config
        self.dtype = dtype
        self.remat = check_remat(remat)
        kw = dict(init_std=config.initializer_range, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.embed_tokens = embedding(config.vocab_size, config.hidden_size, ("vocab", "embed"), **kw)
        self.layers = nnx.List(
            [LlamaDecoderLayer(config, i, dtype=dtype, param_dtype=param_dtype, rngs=rngs) for i in range(config.num_hidden_layers)]
        )
        self.norm = rms_norm(config.hidden_size, epsilon=config.rms_norm_eps, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else dense(config.hidden_size, config.vocab_size, ("embed",), ("vocab",), use_bias=False, **kw)
        )

    def layer_call(self, inputs: AttentionInputs, cache_index: Array | int):
        windows = {self.config.window(i) for i in range(self.config.num_hidden_layers)} - {None}
        full = inputs.mask()
        masks = (full, inputs.mask(windows.pop()) if windows else full)  # each layer picks by its window
        inv_freq = inverse_frequencies(self.config.head_dim, self.config.rope_theta, self.config.rope_scaling)
        rotary = functools.partial(apply_rotary, positions=inputs.positions, inv_freq=inv_freq)
        return lambda layer, h, c: layer(h, masks, rotary, c, cache_index)


FAMILY: dict[str, type[LlamaConfig]] = {c.model_type: c for c in (LlamaConfig, MistralConfig, Qwen2Config)}
