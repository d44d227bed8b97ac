"""Hugging Face PyTorch models as the numerical reference: random tiny configs, saved to disk.

Every parameter (biases and LayerNorms included) is randomised, so a wrongly mapped tensor
changes the outputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Hugging Face reference models need torch (pip install -e '.[test]')")
transformers = pytest.importorskip("transformers")

VOCAB = 97


def randomize(model, seed: int, scale: float = 0.2):
    """Replaces every parameter with random values (LayerNorm scales around 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            is_norm_scale = ("ln_" in name or "LayerNorm" in name) and name.endswith("weight")
            p.copy_(1.0 + 0.1 * noise if is_norm_scale else scale * noise)
    return model.eval()


def gpt2(seed: int = 0, **overrides):
    config = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0)
    config.update(overrides)
    return randomize(transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)), seed)


def roberta(seed: int = 0, masked_lm: bool = False, **overrides):
    config = dict(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=40,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
    )
    config.update(overrides)
    cls = transformers.RobertaForMaskedLM if masked_lm else transformers.RobertaModel
    return randomize(cls(transformers.RobertaConfig(**config)), seed)


def save(model, directory: Path, fmt: str) -> Path:
    """Saves ``model`` as ``safetensors`` (save_pretrained) or ``bin`` (torch.save of the state dict,
    the layout of older checkpoints)."""
    if fmt == "safetensors":
        model.save_pretrained(directory)
    elif fmt == "bin":
        directory.mkdir(parents=True, exist_ok=True)
        model.config.save_pretrained(directory)
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    else:
        raise ValueError(fmt)
    return directory


def padded_batch(lengths, total: int, side: str, pad_id: int, seed: int = 0):
    """Random token ids, each row ``lengths[i]`` real tokens padded on ``side`` to ``total``."""
    rng = np.random.default_rng(seed)
    ids = np.full((len(lengths), total), pad_id, np.int32)
    mask = np.zeros((len(lengths), total), np.int32)
    for i, n in enumerate(lengths):
        span = slice(total - n, total) if side == "left" else slice(0, n)
        ids[i, span] = rng.integers(3, VOCAB, n)
        mask[i, span] = 1
    return ids, mask


def gpt2_forward_logits(model, ids: np.ndarray, mask: np.ndarray):
    """HF logits (a torch tensor, in the autograd graph) with position ids counted from each
    row's first real token (as in generate())."""
    positions = np.maximum(np.cumsum(mask, -1) - 1, 0)
    return model(
        input_ids=torch.tensor(ids, dtype=torch.long),
        attention_mask=torch.tensor(mask, dtype=torch.long),
        position_ids=torch.tensor(positions, dtype=torch.long),
    ).logits


def gpt2_logits(model, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """:func:`gpt2_forward_logits` as a NumPy array, without gradients."""
    with torch.no_grad():
        return gpt2_forward_logits(model, ids, mask).numpy()


def roberta_outputs(model, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask, dtype=torch.long))
    pooled = None if out.pooler_output is None else out.pooler_output.numpy()  # None: no pooler
    return out.last_hidden_state.numpy(), pooled


def max_abs_error(ours, ref, mask=None) -> float:
    diff = np.abs(np.asarray(ours, np.float32) - ref)
    return float((diff[mask.astype(bool)] if mask is not None else diff).max())


def relative_error(ours, ref, mask=None) -> float:
    """max |ours - ref| / max |ref| over the real positions."""
    ref_abs = np.abs(ref[mask.astype(bool)] if mask is not None else ref)
    return max_abs_error(ours, ref, mask) / float(ref_abs.max())


LLAMA_FAMILY = {
    # Llama 3 style: grouped-query attention (2 key/value heads for 4) and Llama 3.1's RoPE rescaling.
    "llama": lambda: transformers.LlamaConfig(
        num_key_value_heads=2, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 16}),
    # Mistral: one key/value head, a head_dim that is not hidden / heads, and a 5-token sliding window.
    "mistral": lambda: transformers.MistralConfig(num_key_value_heads=1, head_dim=16, sliding_window=5),
    # Qwen2: query/key/value biases, tied embeddings, sliding windows from layer 1 on.
    "qwen2": lambda: transformers.Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, use_sliding_window=True,
                                              sliding_window=4, max_window_layers=1),
}


def llama_family(kind: str, seed: int = 0, **overrides):
    """A random tiny HF ``*ForCausalLM`` of the Llama family (``llama``, ``mistral``, ``qwen2``)."""
    config = LLAMA_FAMILY[kind]()
    sizes = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                 max_position_embeddings=64, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    for name, value in {**sizes, **overrides}.items():
        setattr(config, name, value)
    if kind == "qwen2":  # its layer_types follow the window settings at construction
        config.layer_types = ["full_attention"] + ["sliding_attention"] * (config.num_hidden_layers - 1)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.1 * noise if "norm" in name else 0.2 * noise)
    return model.eval()


def causal_logits(model, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """HF logits of a (left-padded) batch, positions counted from each row's first real token."""
    with torch.no_grad():
        return gpt2_forward_logits(model, ids, mask).detach().numpy()


T5_KINDS = {
    # flan-t5 / T5 v1.1: gated GELU, unscaled decoder output (transformers 5 reads tie_word_embeddings=False
    # as that, and still ties the head at construction: t5() gives it its own), more decoder than encoder layers.
    "flan": dict(feed_forward_proj="gated-gelu", num_layers=2, num_decoder_layers=3, tie_word_embeddings=False),
    # T5 v1.0: ReLU feed-forward, LM head tied to the embedding, decoder output scaled by d_model ** -0.5.
    "v1": dict(feed_forward_proj="relu", num_layers=2, num_decoder_layers=2),
}
# How a T5 checkpoint's config.json reads: as transformers 5 writes it (``tie_word_embeddings: true``
# always, the scaling in ``scale_decoder_outputs``, an own head kept in the weights) or as
# transformers 4 wrote it (``tie_word_embeddings`` false for an own head and no scaling, true for
# the embedding as the head and scaling; no ``scale_decoder_outputs``).
T5_LAYOUTS = ("transformers5", "transformers4")


def t5(kind: str, directory: Path, seed: int = 0, layout: str = "transformers5", own_head: bool | None = None,
       **overrides):
    """A random tiny ``T5ForConditionalGeneration`` saved to ``directory`` and read back from it.

    Short bucket ranges (8 buckets, distance 12) make the logarithmic buckets matter at test
    lengths. ``own_head`` (default: ``flan`` has one) gives the model a separate random LM head
    (transformers 5 ties every T5 head at construction); without one the head is the embedding
    (a flan-t5 trained under transformers 5). Saved by transformers 5's ``save_pretrained``; with
    ``layout="transformers4"`` the files are then rewritten as transformers 4 wrote them: its
    config.json keys, and the head in the file exactly when it is untied."""
    import json

    from safetensors.torch import load_file, save_file

    if layout not in T5_LAYOUTS:
        raise ValueError(layout)
    sizes = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_heads=4, relative_attention_num_buckets=8,
                 relative_attention_max_distance=12, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    config = transformers.T5Config(**{**sizes, **T5_KINDS[kind], **overrides})
    torch.manual_seed(seed)
    model = transformers.T5ForConditionalGeneration(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.1 * noise if "layer_norm" in name else 0.3 * noise)
        if kind == "flan" if own_head is None else own_head:
            model.lm_head.weight = torch.nn.Parameter(0.3 * torch.randn(model.shared.weight.shape, generator=g))
    model.save_pretrained(directory)
    if layout == "transformers4":
        hf_config = json.loads((directory / "config.json").read_text())
        scaled = hf_config.pop("scale_decoder_outputs")
        hf_config["tie_word_embeddings"] = scaled  # transformers 4 scaled exactly the tied heads
        (directory / "config.json").write_text(json.dumps(hf_config))
        tensors = load_file(directory / "model.safetensors")
        if scaled:
            assert "lm_head.weight" not in tensors, "transformers 4 cannot scale an own head"
        else:
            tensors.setdefault("lm_head.weight", model.lm_head.weight.detach().clone())
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return transformers.T5ForConditionalGeneration.from_pretrained(directory).eval()
