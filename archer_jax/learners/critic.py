"""ArCHer's double critic: a RoBERTa encoder and four MLP heads ``Q1, Q2, V1, V2``.

Observation and action are encoded separately (each left-truncated by the critic's tokenizer);
``Q_i`` reads ``[e(s); e(a)]`` and ``V_i`` reads ``e(s)``. The embedding ``e`` is the encoder's
pooler output (online ArCHer) or the first token's hidden state (``embedding="first_token"``,
the offline variant).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax.learners.packed_batches import PackedTokens
from archer_jax.learners.train_state import path_names
from archer_jax.models.layers import DType, annotated
from archer_jax.models.roberta.model import RobertaModel
from archer_jax.models.tokenizer import Tokens

Array = jax.Array

EMBEDDINGS = ("pooler", "first_token")
HEADS = ("q1", "q2", "v1", "v2")


class CriticValues(NamedTuple):
    """Both heads of the double critic: ``Q_i(s, a)`` and ``V_i(s)``, each ``[batch]``."""

    q1: Array
    q2: Array
    v1: Array
    v2: Array


class MLPHead(nnx.Module):
    """``in -> d -> d -> 1`` with ReLU between layers (the official heads)."""

    def __init__(self, in_features: int, hidden: int, *, dtype: DType, param_dtype: DType, rngs: nnx.Rngs):
        def linear(i: int, o: int, names: tuple) -> nnx.Linear:
            return nnx.Linear(
                i,
                o,
                dtype=dtype,
                param_dtype=param_dtype,
                kernel_init=annotated(nnx.initializers.lecun_normal(), names),
                bias_init=annotated(nnx.initializers.zeros_init(), names[1:]),
                rngs=rngs,
            )

        self.fc1 = linear(in_features, hidden, ("embed", "mlp"))
        self.fc2 = linear(hidden, hidden, ("mlp", "embed"))
        self.out = linear(hidden, 1, ("embed", None))

    def __call__(self, x: Array) -> Array:
        x = jax.nn.relu(self.fc1(x))
        x = jax.nn.relu(self.fc2(x))
        return self.out(x)[..., 0].astype(jnp.float32)


class DoubleCritic(nnx.Module):
    """The encoder plus ``Q1, Q2`` (on ``[e(s); e(a)]``) and ``V1, V2`` (on ``e(s)``) heads,
    each of hidden width equal to the encoder's."""

    def __init__(
        self,
        encoder: RobertaModel,
        *,
        embedding: str = "pooler",
        dtype: DType = jnp.float32,
        param_dtype: DType = jnp.float32,
        rngs: nnx.Rngs,
    ):
        if embedding not in EMBEDDINGS:
            raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {embedding!r}")
        self.encoder = encoder
        self.embedding = embedding
        d = encoder.config.hidden_size
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q1 = MLPHead(2 * d, d, **kw)
        self.q2 = MLPHead(2 * d, d, **kw)
        self.v1 = MLPHead(d, d, **kw)
        self.v2 = MLPHead(d, d, **kw)

    def embed(self, tokens: Tokens) -> Array:
        """``e(x)``: ``[batch, d]`` for right-padded ``tokens``."""
        out = self.encoder(tokens.ids, tokens.mask)
        return out.pooler_output if self.embedding == "pooler" else out.last_hidden_state[:, 0]

    def embed_packed(self, ids: Array, segments: Array, positions: Array, starts: Array) -> Array:
        """``e(x)``: ``[sequences, d]``, in input order, for sequences packed several to a row
        (:func:`archer_jax.models.packing.pack`'s arrays): equal to :meth:`embed` of them padded."""
        return self.embed_groups(PackedTokens(ids[None], segments[None], positions[None], starts[None]))[0]

    def embed_groups(self, packed: PackedTokens) -> Array:
        """``e(x)``: ``[groups, sequences, d]`` for groups of packed sequences
        (:class:`~archer_jax.learners.packed_batches.PackedTokens`), each group's in its input
        order: one encoder pass over every group's rows, then each group gathers its own."""
        groups, rows, length = packed.ids.shape
        flat = lambda a: a.reshape(groups * rows, length)  # noqa: E731
        h = self.encoder(flat(packed.ids), segment_ids=flat(packed.segments),
                         position_ids=flat(packed.positions)).last_hidden_state
        h = h.reshape(groups, rows, length, h.shape[-1])
        first = jax.vmap(lambda hg, starts: hg[starts[:, 0], starts[:, 1]])(h, packed.starts)
        return self.encoder.pool(first) if self.embedding == "pooler" else first

    def q_values(self, state_embedding: Array, action_embedding: Array) -> tuple[Array, Array]:
        both = jnp.concatenate([state_embedding, action_embedding], axis=-1)
        return self.q1(both), self.q2(both)

    def v_values(self, state_embedding: Array) -> tuple[Array, Array]:
        return self.v1(state_embedding), self.v2(state_embedding)

    def __call__(self, observation: Tokens, action: Tokens) -> CriticValues:
        """``Q_i(s, a)`` and ``V_i(s)`` for a batch of (observation, action) pairs."""
        s = self.embed(observation)
        q1, q2 = self.q_values(s, self.embed(action))
        v1, v2 = self.v_values(s)
        return CriticValues(q1, q2, v1, v2)


def with_initial_value(params: nnx.State, value: float) -> nnx.State:
    """A :class:`DoubleCritic`'s parameters ``params`` with the output bias of each head set to
    ``value``, so that every ``Q_i`` and ``V_i`` starts at ``value`` plus what the rest of the head
    gives (near 0 at initialization). The other parameters are the same arrays."""

    def set_bias(path, leaf):
        key = path_names(path)
        if len(key) >= 3 and key[0] in HEADS and key[1:3] == ("out", "bias"):
            return np.full(leaf.shape, value, dtype=leaf.dtype)
        return leaf

    return jax.tree_util.tree_map_with_path(set_bias, params)
