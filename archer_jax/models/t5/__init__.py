"""T5 / flan-t5 encoder-decoder (the paper's oracles)."""

from archer_jax.models.t5.model import T5Config, T5ForConditionalGeneration

__all__ = ["T5Config", "T5ForConditionalGeneration"]
