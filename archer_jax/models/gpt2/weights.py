"""Hugging Face GPT-2 tensors <-> our parameters.

HF's GPT-2 uses ``Conv1D`` layers whose weights are ``[in, out]`` (our layout already), and a
fused ``c_attn`` that holds query, key and value side by side. Rule names are those of a
``GPT2LMHeadModel`` checkpoint (``transformer.`` prefix).
"""

from __future__ import annotations

import numpy as np

from archer_jax.models.gpt2.model import GPT2Config
from archer_jax.models.weight_rules import Rule, copy, layer_norm, reshaped

# Tensors of some checkpoints that are not parameters of ours: causal-mask buffers of older
# checkpoints, and the LM head when it is tied to the token embedding.
IGNORED = (".attn.bias", ".attn.masked_bias", "lm_head.weight")


def canonical_name(name: str) -> str:
    """``GPT2Model`` checkpoints (e.g. the hub's ``gpt2``) lack the ``transformer.`` prefix."""
    return name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name


def rules(config: GPT2Config) -> list[Rule]:
    """The tensor mapping of a GPT-2 model with this config."""
    e, h, d = config.n_embd, config.n_head, config.head_dim
    t = "transformer."
    out = [
        copy(t + "wte.weight", ("wte", "embedding")),
        copy(t + "wpe.weight", ("wpe", "embedding")),
        *layer_norm(t + "ln_f", ("ln_f",)),
    ]
    if not config.tie_word_embeddings:
        out.append(Rule("lm_head.weight", (("lm_head", "kernel"),), lambda w: (w.T,), lambda k: k.T))
    for i in range(config.n_layer):
        p, q = f"{t}h.{i}.", ("h", i)
        qkv = tuple((*q, "attn", name) for name in ("query", "key", "value"))
        out += [
            *layer_norm(p + "ln_1", (*q, "ln_1")),
            *layer_norm(p + "ln_2", (*q, "ln_2")),
            Rule(
                p + "attn.c_attn.weight",
                tuple((*path, "kernel") for path in qkv),
                lambda w: tuple(x.reshape(e, h, d) for x in np.split(w, 3, axis=1)),
                lambda *ks: np.concatenate([k.reshape(e, e) for k in ks], axis=1),
            ),
            Rule(
                p + "attn.c_attn.bias",
                tuple((*path, "bias") for path in qkv),
                lambda b: tuple(x.reshape(h, d) for x in np.split(b, 3)),
                lambda *bs: np.concatenate([b.reshape(e) for b in bs]),
            ),
            reshaped(p + "attn.c_proj.weight", (*q, "attn", "out", "kernel"), (h, d, e), (e, e)),
            copy(p + "attn.c_proj.bias", (*q, "attn", "out", "bias")),
            copy(p + "mlp.c_fc.weight", (*q, "mlp", "fc", "kernel")),
            copy(p + "mlp.c_fc.bias", (*q, "mlp", "fc", "bias")),
            copy(p + "mlp.c_proj.weight", (*q, "mlp", "proj", "kernel")),
            copy(p + "mlp.c_proj.bias", (*q, "mlp", "proj", "bias")),
        ]
    return out
