"""Hugging Face Llama / Mistral / Qwen2 tensors <-> our parameters.

HF's projections are ``torch.nn.Linear`` (weights ``[out, in]``); ours are kernels over
``(heads, head_dim)``. Rule names are those of a ``*ForCausalLM`` checkpoint (``model.`` prefix
and ``lm_head.weight`` when the embeddings are untied).
"""

from __future__ import annotations

from archer_jax.models.llama.model import LlamaConfig
from archer_jax.models.weight_rules import Rule, copy, torch_linear

# Tensors some checkpoints hold that are not parameters of ours: the tied LM head, and the rotary
# frequency buffers of older checkpoints (recomputed from the config).
IGNORED = ("lm_head.weight", "rotary_emb.inv_freq")


def canonical_name(name: str) -> str:
    """``LlamaModel``-style checkpoints lack the ``model.`` prefix."""
    return name if name.startswith(("model.", "lm_head.")) else "model." + name


def _linear(hf: str, ours: tuple, in_shape: tuple[int, ...], out_shape: tuple[int, ...], bias: bool) -> list[Rule]:
    weight, bias_rule = torch_linear(hf, ours, in_shape, out_shape)
    return [weight, bias_rule] if bias else [weight]


def rules(config: LlamaConfig) -> list[Rule]:
    """The tensor mapping of a Llama-family model with this config."""
    e, h, kv, d, m = (config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim,
                      config.intermediate_size)
    out = [copy("model.embed_tokens.weight", ("embed_tokens", "embedding")), copy("model.norm.weight", ("norm", "scale"))]
    if not config.tie_word_embeddings:
        out += _linear("lm_head", ("lm_head",), (e,), (config.vocab_size,), bias=False)
    for i in range(config.num_hidden_layers):
        p, q = f"model.layers.{i}.", ("layers", i)
        attn, mlp = (*q, "self_attn"), (*q, "mlp")
        qkv_bias, mlp_bias = config.attention_bias, config.mlp_bias
        out += [
            copy(p + "input_layernorm.weight", (*q, "input_layernorm", "scale")),
            copy(p + "post_attention_layernorm.weight", (*q, "post_attention_layernorm", "scale")),
            *_linear(p + "self_attn.q_proj", (*attn, "query"), (e,), (h, d), qkv_bias),
            *_linear(p + "self_attn.k_proj", (*attn, "key"), (e,), (kv, d), qkv_bias),
            *_linear(p + "self_attn.v_proj", (*attn, "value"), (e,), (kv, d), qkv_bias),
            *_linear(p + "self_attn.o_proj", (*attn, "out"), (h, d), (e,), False),
            *_linear(p + "mlp.gate_proj", (*mlp, "gate_proj"), (e,), (m,), mlp_bias),
            *_linear(p + "mlp.up_proj", (*mlp, "up_proj"), (e,), (m,), mlp_bias),
            *_linear(p + "mlp.down_proj", (*mlp, "down_proj"), (m,), (e,), mlp_bias),
        ]
    return out
