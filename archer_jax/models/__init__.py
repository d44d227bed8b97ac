"""Native Flax NNX models that load and save Hugging Face checkpoints: GPT-2 and the Llama family
(Llama 2/3, Mistral, Qwen2) as policies, RoBERTa as the critic's encoder, T5 / flan-t5 as the
environments' oracles.

    from archer_jax import models
    policy = models.load_causal_lm("gpt2")           # hub name or HF-format directory
    tokenizer = models.load_tokenizer("gpt2")        # left padding, left truncation, pad = EOS
    batch = models.encode(tokenizer, ["Questions:\\n"], max_length=512)
    logits = policy(batch.input_ids, batch.attention_mask).logits
"""

from archer_jax.models.attention import KVCache
from archer_jax.models.causal_lm import CausalLMOutput, init_cache
from archer_jax.models.gpt2 import GPT2Config, GPT2LMHeadModel
from archer_jax.models.hub import ModelLoadError
from archer_jax.models.llama import LlamaConfig, LlamaForCausalLM, MistralConfig, Qwen2Config
from archer_jax.models.pretrained import (
    ARCHITECTURES,
    CAUSAL_LM_TYPES,
    load_causal_lm,
    load_gpt2,
    load_pretrained,
    load_roberta,
    load_t5,
    params_as_numpy,
    save_pretrained,
)
from archer_jax.models.roberta import EncoderOutput, RobertaConfig, RobertaModel
from archer_jax.models.t5 import T5Config, T5ForConditionalGeneration
from archer_jax.models.tiny import build_tiny
from archer_jax.models.tokenizer import Tokens, bucket_length, encode, load_tokenizer

__all__ = [
    "ARCHITECTURES",
    "CAUSAL_LM_TYPES",
    "LlamaConfig",
    "LlamaForCausalLM",
    "MistralConfig",
    "Qwen2Config",
    "load_causal_lm",
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
    "load_t5",
    "T5Config",
    "T5ForConditionalGeneration",
    "load_tokenizer",
    "params_as_numpy",
    "save_pretrained",
]
