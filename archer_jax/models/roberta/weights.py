"""Hugging Face RoBERTa tensors <-> our parameters.

HF's RoBERTa uses ``torch.nn.Linear`` (weights ``[out, in]``). Rule names are those of a
``RobertaModel`` checkpoint (no prefix); ``roberta-base`` on the hub is a ``RobertaForMaskedLM``
checkpoint (``roberta.`` prefix, an ``lm_head``, and no pooler: the pooler then keeps its fresh
initialisation, as in Hugging Face).
"""

from __future__ import annotations

from archer_jax.models.roberta.model import RobertaConfig
from archer_jax.models.weight_rules import Rule, copy, layer_norm, torch_linear

IGNORED = ("lm_head.", "classifier.", "embeddings.position_ids")


def canonical_name(name: str) -> str:
    """Drops the ``roberta.`` prefix of task-head checkpoints; old ``gamma``/``beta`` names."""
    if name.startswith("roberta."):
        name = name[len("roberta.") :]
    if name.endswith(".gamma"):
        name = name[: -len("gamma")] + "weight"
    elif name.endswith(".beta"):
        name = name[: -len("beta")] + "bias"
    return name


def rules(config: RobertaConfig) -> list[Rule]:
    """The tensor mapping of a RoBERTa model with this config."""
    e, h = config.hidden_size, config.num_attention_heads
    d, m = e // h, config.intermediate_size
    out = [
        copy("embeddings.word_embeddings.weight", ("embeddings", "word", "embedding")),
        copy("embeddings.position_embeddings.weight", ("embeddings", "position", "embedding")),
        copy("embeddings.token_type_embeddings.weight", ("embeddings", "token_type", "embedding")),
        *layer_norm("embeddings.LayerNorm", ("embeddings", "norm")),
        *torch_linear("pooler.dense", ("pooler",), (e,), (e,), optional=True),
    ]
    for i in range(config.num_hidden_layers):
        p, q = f"encoder.layer.{i}.", ("layers", i)
        out += [
            *torch_linear(p + "attention.self.query", (*q, "attention", "query"), (e,), (h, d)),
            *torch_linear(p + "attention.self.key", (*q, "attention", "key"), (e,), (h, d)),
            *torch_linear(p + "attention.self.value", (*q, "attention", "value"), (e,), (h, d)),
            *torch_linear(p + "attention.output.dense", (*q, "attention", "out"), (h, d), (e,)),
            *layer_norm(p + "attention.output.LayerNorm", (*q, "attention_norm")),
            *torch_linear(p + "intermediate.dense", (*q, "intermediate"), (e,), (m,)),
            *torch_linear(p + "output.dense", (*q, "output"), (m,), (e,)),
            *layer_norm(p + "output.LayerNorm", (*q, "output_norm")),
        ]
    return out
