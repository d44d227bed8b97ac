"""GPT-2 causal language model."""

from archer_jax.models.gpt2.model import CausalLMOutput, GPT2Config, GPT2LMHeadModel, init_cache

__all__ = ["CausalLMOutput", "GPT2Config", "GPT2LMHeadModel", "init_cache"]
