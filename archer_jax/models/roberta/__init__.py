"""RoBERTa encoder with pooler."""

from archer_jax.models.roberta.model import EncoderOutput, RobertaConfig, RobertaModel

__all__ = ["EncoderOutput", "RobertaConfig", "RobertaModel"]
