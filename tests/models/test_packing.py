"""Packed sequences (several to a row) against the same sequences padded one to a row."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import learners
from archer_jax.models import packing, tiny
from archer_jax.models.roberta.model import RobertaModel
from archer_jax.models.tokenizer import pad_rows

PAD = 1  # RoBERTa's pad_token_id


def _rows(rng, lengths, vocab=200):
    return [rng.integers(3, vocab, n).astype(np.int32) for n in lengths]


def test_pack_places_every_sequence_whole_in_a_row_of_its_own_numbering():
    rng = np.random.default_rng(0)
    rows = _rows(rng, [5, 30, 12, 17, 3, 30, 9])
    p = packing.pack(rows, PAD, max_length=64, row_multiple=4)
    assert p.ids.shape == (4, 32)  # 106 tokens in rows of 32 (the bucket of 30): 4 rows
    for i, row in enumerate(rows):
        r, c = p.starts[i]
        np.testing.assert_array_equal(p.ids[r, c:c + len(row)], row)
        np.testing.assert_array_equal(p.positions[r, c:c + len(row)], np.arange(len(row)))
        assert len(set(p.segments[r, c:c + len(row)])) == 1 and p.segments[r, c] > 0
    assert int((p.segments > 0).sum()) == sum(len(r) for r in rows)  # nothing lost, nothing twice
    assert p.padding == pytest.approx(1 - 106 / (4 * 32))


def test_pack_keeps_the_last_tokens_of_a_long_sequence_and_refuses_an_empty_one():
    p = packing.pack([np.arange(3, 103)], PAD, max_length=64)
    np.testing.assert_array_equal(p.ids[0], np.arange(39, 103))
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        packing.pack([np.arange(3, 6), np.array([], np.int32)], PAD, max_length=64)


@pytest.fixture(scope="module")
def critic():
    encoder = RobertaModel(tiny.tiny_config("roberta", 200), rngs=nnx.Rngs(0))
    return learners.DoubleCritic(encoder, rngs=nnx.Rngs(1))


@pytest.mark.parametrize("embedding", [pytest.param("pooler", marks=pytest.mark.slow), "first_token"])  # pooler: over 5 s
def test_packed_embeddings_and_their_gradients_equal_the_padded_ones(critic, embedding):
    """At "highest" precision (tests/conftest.py): the critic's values of sequences packed several
    to a row equal those of the same sequences padded one to a row, and so do the gradients of a
    loss of them with respect to every parameter."""
    rng = np.random.default_rng(1)
    rows = _rows(rng, rng.integers(2, 60, 12))
    padded = pad_rows(rows, PAD, left=False, max_length=64)
    p = packing.pack(rows, PAD, max_length=64, row_multiple=2)
    assert p.ids.shape[0] < len(rows)  # several to a row
    graphdef, params = nnx.split(critic)
    weights = jnp.asarray(rng.normal(size=len(rows)), jnp.float32)

    def loss(params, packed: bool):
        model = nnx.merge(graphdef, params)
        model.embedding = embedding
        e = model.embed_packed(*map(jnp.asarray, p)) if packed else model.embed(padded)
        return jnp.sum(weights * model.v1(e)), e

    (l_pad, e_pad), g_pad = jax.value_and_grad(loss, has_aux=True)(params, False)
    (l_pack, e_pack), g_pack = jax.value_and_grad(loss, has_aux=True)(params, True)
    np.testing.assert_allclose(e_pack, e_pad, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l_pack, l_pad, rtol=1e-5)
    # float32 sums in another order: within 1e-5 of the gradient's scale (some arrays' gradients,
    # such as the attention key bias's, are 0 up to rounding: the softmax ignores a shift)
    scale = max(float(np.abs(b).max()) for b in jax.tree.leaves(g_pad))
    for a, b in zip(jax.tree.leaves(g_pack), jax.tree.leaves(g_pad)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * scale)


def test_the_segment_mask_is_what_tells_packed_sequences_apart(critic):
    """Without it (one mask over the whole row) the packed values differ: the test above can fail."""
    rng = np.random.default_rng(2)
    rows = _rows(rng, [10, 12, 9, 20])
    p = packing.pack(rows, PAD, max_length=64)
    good = critic.embed_packed(*map(jnp.asarray, p))
    h = critic.encoder(jnp.asarray(p.ids), jnp.asarray((p.segments > 0).astype(np.int32))).last_hidden_state
    merged = critic.encoder.pool(h[p.starts[:, 0], p.starts[:, 1]])
    assert not np.allclose(good, merged, atol=1e-3)
