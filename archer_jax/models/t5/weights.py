"""Hugging Face T5 tensors <-> our parameters.

Names are those of ``T5ForConditionalGeneration`` (``shared``, ``encoder.block.N.layer.M...``,
``lm_head``). Only block 0 of each stack holds the relative position bias table in Hugging Face;
ours sits on the stack. The per-stack ``embed_tokens`` copies of ``shared`` (present in
``state_dict()`` files such as the official ArCHer oracles) are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from archer_jax.models.t5.model import T5Config
from archer_jax.models.weight_rules import Rule, copy, torch_linear

IGNORED = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def canonical_name(name: str) -> str:
    """Checkpoint names are used as they are."""
    return name


def _linear(hf: str, ours: tuple, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> Rule:
    return torch_linear(hf, ours, in_shape, out_shape)[0]  # the weight: T5 has no biases


def _attention(hf: str, ours: tuple, config: T5Config) -> list[Rule]:
    e, h, d = config.d_model, config.num_heads, config.d_kv
    return [
        *(_linear(f"{hf}.{n}", (*ours, name), (e,), (h, d)) for n, name in (("q", "query"), ("k", "key"), ("v", "value"))),
        _linear(f"{hf}.o", (*ours, "out"), (h, d), (e,)),
    ]


def _feed_forward(hf: str, ours: tuple, config: T5Config) -> list[Rule]:
    e, m = config.d_model, config.d_ff
    inward = ("wi_0", "wi_1") if config.gated else ("wi",)
    return [*(_linear(f"{hf}.{n}", (*ours, n), (e,), (m,)) for n in inward), _linear(f"{hf}.wo", (*ours, "wo"), (m,), (e,))]


def rules(config: T5Config) -> list[Rule]:
    """The tensor mapping of a T5 model with this config."""
    out = [copy("shared.weight", ("shared", "embedding"))]
    for stack, count in (("encoder", config.num_layers), ("decoder", config.decoder_layers)):
        out += [
            copy(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                 (stack, "relative_attention_bias", "embedding")),
            copy(f"{stack}.final_layer_norm.weight", (stack, "final_norm", "scale")),
        ]
        for i in range(count):
            p, q = f"{stack}.block.{i}.layer.", (stack, "blocks", i)
            out += [*_attention(p + "0.SelfAttention", (*q, "self_attention"), config),
                    copy(p + "0.layer_norm.weight", (*q, "self_norm", "scale"))]
            ff = 1
            if stack == "decoder":
                out += [*_attention(p + "1.EncDecAttention", (*q, "cross_attention"), config),
                        copy(p + "1.layer_norm.weight", (*q, "cross_norm", "scale"))]
                ff = 2
            out += [*_feed_forward(f"{p}{ff}.DenseReluDense", (*q, "ff"), config),
                    copy(f"{p}{ff}.layer_norm.weight", (*q, "ff_norm", "scale"))]
    if not config.tie_word_embeddings:
        out.append(_linear("lm_head", ("lm_head",), (config.d_model,), (config.vocab_size,)))
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool((a == b).all())


def fit_to_tensors(config: T5Config, tensors: Mapping[str, np.ndarray]) -> T5Config:
    """``config`` with the LM head the weights hold, as transformers 5 reads them: an
    ``lm_head.weight`` that differs from the embedding is a head of its own, whatever
    ``tie_word_embeddings`` says (transformers 5 writes ``true`` for every T5 yet keeps such a
    head in the file); one equal to the embedding, or none, is the embedding. The decoder-output
    scaling keeps the reading of ``config.json``
    (:func:`~archer_jax.models.t5.model.scales_decoder_output`).

    ``tie_word_embeddings: false`` without an ``lm_head.weight`` is left as it is, so loading
    fails naming the missing tensor: transformers 4 gave such a file an untrained random head
    (transformers 5 would use the embedding, which that model was never trained with).
    """
    scaled = config.scales_output
    if "lm_head.weight" not in tensors:
        return config.replace(scale_decoder_outputs=scaled)
    if config.tie_word_embeddings:  # a head in a file that says tied: transformers 5 compares the two
        tied = "shared.weight" in tensors and _same(tensors["lm_head.weight"], tensors["shared.weight"])
    else:  # transformers 4's own head (transformers 5 ties one equal to the embedding: the same logits)
        tied = False
    return config.replace(tie_word_embeddings=tied, scale_decoder_outputs=scaled)


def config_from_tensors(tensors: dict, **overrides) -> T5Config:
    """The config of a T5 state dict without its ``config.json`` (the official oracle files),
    read from the tensor shapes: vocabulary, widths, heads, layer counts, buckets, gated or not,
    tied or not. ``relative_attention_max_distance`` and the special token ids cannot be read
    from shapes: they keep the T5 defaults unless given in ``overrides``. A head equal to the
    embedding, or none, is read as tied; whether the decoder output is scaled is not in the
    shapes either: ``overrides["scale_decoder_outputs"]`` (from the base model's config) tells,
    else a tied head is read as scaled (T5 v1.0) and an own head as not (flan-t5, T5 v1.1)."""
    def shape(name: str) -> tuple[int, ...]:
        if name not in tensors:
            raise KeyError(f"not a T5 state dict: it has no tensor {name}")
        return tuple(tensors[name].shape)

    vocab, d_model = shape("shared.weight")
    buckets, heads = shape("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    inner = shape("encoder.block.0.layer.0.SelfAttention.q.weight")[0]
    gated = "encoder.block.0.layer.1.DenseReluDense.wi_0.weight" in tensors
    d_ff = shape(f"encoder.block.0.layer.1.DenseReluDense.{'wi_0' if gated else 'wi'}.weight")[0]

    def blocks(stack: str) -> int:
        return len({name.split(".")[2] for name in tensors if name.startswith(f"{stack}.block.")})

    tied = "lm_head.weight" not in tensors or _same(tensors["lm_head.weight"], tensors["shared.weight"])
    fields = dict(vocab_size=vocab, d_model=d_model, d_kv=inner // heads, d_ff=d_ff, num_layers=blocks("encoder"),
                  num_decoder_layers=blocks("decoder"), num_heads=heads, relative_attention_num_buckets=buckets,
                  feed_forward_proj="gated-gelu" if gated else "relu", tie_word_embeddings=tied)
    return T5Config(**{**fields, **overrides})
