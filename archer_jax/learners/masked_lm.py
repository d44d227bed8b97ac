"""Masked-LM pretraining of the critic's encoder (RoBERTa's objective): what a small critic built
offline lacks where the paper's starts from a pretrained ``roberta-base``.

    model = MaskedLM(critic.encoder, rngs=nnx.Rngs(0))   # the encoder and a temporary LM head
    batch = mask_tokens(rows, rng, mask_id=..., vocab_size=..., special_ids=...)
    state, metrics = mlm_step(graphdef, tx, state, batch)

The head is RoBERTa's (dense, GELU, layer norm, then the word embeddings transposed plus a bias),
used only to train the encoder and discarded with it. The masking is BERT's: 15% of the real,
non-special tokens are chosen; of those 80% become the mask token, 10% a random token, 10% stay;
the loss is the cross-entropy of the chosen positions' original tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from archer_jax.learners.optimization import accumulate_gradients, adam_update, keep_if_finite
from archer_jax.learners.train_state import TrainState
from archer_jax.models.layers import annotated, dense, layer_norm
from archer_jax.models.roberta.model import RobertaModel
from archer_jax.models.tokenizer import Tokens

Array = jax.Array


class MLMBatch(NamedTuple):
    """Right-padded texts with some tokens masked (``inputs``), the original tokens (``targets``)
    and 1 where a position is scored (``weights``)."""

    inputs: Tokens
    targets: Array  # [batch, length] int32
    weights: Array  # [batch, length] float32


class MaskedLM(nnx.Module):
    """An encoder with RoBERTa's masked-LM head on its last hidden states (the head's decoder is
    the encoder's word embedding matrix, transposed)."""

    def __init__(self, encoder: RobertaModel, *, rngs: nnx.Rngs):
        config = encoder.config
        self.encoder = encoder
        kw = dict(dtype=jnp.float32, param_dtype=jnp.float32, rngs=rngs)
        self.dense = dense(config.hidden_size, config.hidden_size, ("embed",), ("embed",),
                           init_std=config.initializer_range, **kw)
        self.norm = layer_norm(config.hidden_size, epsilon=config.layer_norm_eps, **kw)
        self.bias = nnx.Param(annotated(nnx.initializers.zeros_init(), ("vocab",))(rngs.params(), (config.vocab_size,)))

    def __call__(self, tokens: Tokens) -> Array:
        """``[batch, length, vocab]`` logits of the original token at every position."""
        hidden = self.encoder(tokens.ids, tokens.mask).last_hidden_state
        x = self.norm(jax.nn.gelu(self.dense(hidden), approximate=False))
        words = self.encoder.embeddings.word.embedding[...]
        return (x.astype(jnp.float32) @ words.astype(jnp.float32).T) + self.bias[...]


def mask_tokens(rows: Sequence[np.ndarray], rng: np.random.Generator, *, mask_id: int, vocab_size: int,
                special_ids: Sequence[int], pad_id: int, length: int, rate: float = 0.15) -> MLMBatch:
    """BERT's masking of ``rows`` (token ids, each at most ``length``), right-padded to ``length``:
    ``rate`` of each row's real, non-special tokens are scored (at least one where it has any);
    of those 80% are replaced by ``mask_id``, 10% by a random token, 10% kept."""
    count = len(rows)
    ids = np.full((count, length), pad_id, np.int32)
    mask = np.zeros((count, length), np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    candidate = (mask == 1) & ~np.isin(ids, np.asarray(list(special_ids), np.int32))
    chosen = candidate & (rng.random(ids.shape) < rate)
    for i in np.flatnonzero(candidate.any(axis=1) & ~chosen.any(axis=1)):  # every row scores something
        chosen[i, rng.choice(np.flatnonzero(candidate[i]))] = True
    draw = rng.random(ids.shape)
    inputs = np.where(chosen & (draw < 0.8), mask_id, ids)
    random_ids = rng.integers(0, vocab_size, ids.shape, dtype=np.int32)
    inputs = np.where(chosen & (draw >= 0.8) & (draw < 0.9), random_ids, inputs).astype(np.int32)
    return MLMBatch(Tokens(inputs, mask), ids, chosen.astype(np.float32))


def mlm_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, state: TrainState, batch: MLMBatch, *,
             micro_batches: int = 1) -> tuple[TrainState, dict[str, Array]]:
    """One optimizer step of the masked-LM loss (the mean cross-entropy over the step's scored
    positions, whatever its micro-batch layout), over ``micro_batches`` scanned micro-batches."""
    scored = jnp.maximum(jnp.sum(batch.weights), 1.0) / micro_batches

    def loss_fn(params: nnx.State, b: MLMBatch):
        logits = nnx.merge(graphdef, params)(b.inputs)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, b.targets)
        correct = (jnp.argmax(logits, axis=-1) == b.targets).astype(jnp.float32)
        return jnp.sum(nll * b.weights) / scored, dict(accuracy=jnp.sum(correct * b.weights) / scored)

    grads, loss, aux = accumulate_gradients(loss_fn, state.params, batch, micro_batches)
    params, opt_state = adam_update(state, tx, grads)
    state, metrics = keep_if_finite(state, state._replace(params=params, opt_state=opt_state, step=state.step + 1),
                                    loss, grads)
    metrics.update(loss=loss, accuracy=jnp.sum(aux["accuracy"]))
    return state, metrics
