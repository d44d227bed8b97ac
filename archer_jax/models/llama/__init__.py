"""The Llama decoder family (Llama 2/3, Mistral, Qwen2)."""

from archer_jax.models.llama.model import FAMILY, LlamaConfig, LlamaForCausalLM, MistralConfig, Qwen2Config

__all__ = ["FAMILY", "LlamaConfig", "LlamaForCausalLM", "MistralConfig", "Qwen2Config"]
