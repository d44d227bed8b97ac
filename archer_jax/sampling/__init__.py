"""Batched generation from the causal-LM policies (GPT-2, Llama, Mistral, Qwen2).

* :mod:`archer_jax.sampling.sampler`: :class:`Sampler`, text in and text out (tokenizing,
  stop strings, finish reasons), the usual entry point.
* :mod:`archer_jax.sampling.decoding`: :class:`Decoder`, token ids in and sampled ids and
  log-probs out on device (one jitted prefill, one jitted decode loop), and the sampling math.
"""

from archer_jax.sampling.decoding import (
    Decoder,
    DecodeState,
    SampledTokens,
    SamplingParams,
    choose_tokens,
    decode,
    filter_logits,
    prefill,
    row_uniforms,
    sample_categorical,
)
from archer_jax.sampling.sampler import Generation, Sampler, stop_token_table

__all__ = [
    "DecodeState",
    "Decoder",
    "Generation",
    "SampledTokens",
    "Sampler",
    "SamplingParams",
    "choose_tokens",
    "decode",
    "filter_logits",
    "prefill",
    "row_uniforms",
    "sample_categorical",
    "stop_token_table",
]
