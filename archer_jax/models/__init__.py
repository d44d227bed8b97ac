"""Native Flax NNX GPT-2 and RoBERTa that load and save Hugging Face checkpoints.

    from archer_jax import models
    policy = models.load_gpt2("gpt2")                # hub name or HF-format directory
    tokenizer = models.load_tokenizer("gpt2")        # left padding, left truncation, pad = EOS
    batch = models.encode(tokenizer, ["Questions:\\n"], max_length=512)
    logits = policy(batch.input_ids, batch.attention_mask).logits
"""

from archer_jax.models.attention import KVCache
from archer_jax.models.gpt2 import CausalLMOutput, GPT2Config, GPT2LMHeadModel, init_cache
from archer_jax.models.hub import ModelLoadError
from archer_jax.models.pretrained import (
    ARCHITECTURES,
    load_gpt2,
    load_pretrained,
    load_roberta,
    params_as_numpy,
    save_pretrained,
)
from archer_jax.models.roberta import EncoderOutput, RobertaConfig, RobertaModel
from archer_jax.models.tiny import build_tiny
from archer_jax.models.tokenizer import Tokens, bucket_length, encode, load_tokenizer

__all__ = [
    "ARCHITECTURES",
    "CausalLMOutput",
    "EncoderOutput",
    "GPT2Config",
    "GPT2LMHeadModel",
    "KVCache",
    "ModelLoadError",
    "RobertaConfig",
    "RobertaModel",
    "Tokens",
    "bucket_length",
    "build_tiny",
    "encode",
    "init_cache",
    "load_gpt2",
    "load_pretrained",
    "load_roberta",
    "load_tokenizer",
    "params_as_numpy",
    "save_pretrained",
]
