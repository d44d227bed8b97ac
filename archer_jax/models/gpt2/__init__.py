"""GPT-2 causal language model."""

from archer_jax.models.causal_lm import CausalLMOutput, init_cache
from archer_jax.models.gpt2.model import GPT2Config, GPT2LMHeadModel

__all__ = ["CausalLMOutput", "GPT2Config", "GPT2LMHeadModel", "init_cache"]
