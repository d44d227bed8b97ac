"""The TPU flash attention path (Pallas's kernel), run here in Pallas's TPU interpret mode: it gives
the XLA path's attention and gradients at every real query, and the models hand it segment ids
that mean what their boolean masks mean (padded rows, packed rows, causal and bidirectional)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from archer_jax import models
from archer_jax.models import attention
from archer_jax.models.packing import pack

L = attention.FLASH_BLOCK


def on_tpu_path(fn, *args):
    """``fn(*args)`` traced for a TPU (the flash kernel where it fits), run by Pallas's interpreter."""
    with attention.building_for("tpu"), pltpu.force_tpu_interpret_mode():
        return fn(*args)


def jitted(fn):
    """``fn`` jitted afresh: JAX's trace caches know nothing of :func:`attention.building_for`."""
    return jax.jit(lambda *args: fn(*args))


def segments_of(rows: list[list[int]]) -> np.ndarray:
    """``[rows, L]`` segment ids from each row's sequence lengths (the rest padding)."""
    out = np.zeros((len(rows), L), np.int32)
    for r, lengths in enumerate(rows):
        starts = np.cumsum([0, *lengths])
        for s, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
            out[r, a:b] = s + 1
    return out


@pytest.mark.parametrize("causal,kv_heads", [(True, 4), (False, 4), (True, 2)])
def test_the_kernel_gives_the_xla_paths_attention_and_gradients(causal, kv_heads):
    rng = np.random.default_rng(0)
    seg = jnp.asarray(segments_of([[50, 47, 20], [L], [90]]))
    q = jnp.asarray(rng.normal(size=(3, 4, L, 16)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(3, kv_heads, L, 16)), jnp.float32) for _ in range(2))
    allowed = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] > 0)
    if causal:
        allowed &= jnp.tril(jnp.ones((L, L), bool))
    mask = attention.SegmentMask(allowed[:, None], seg, seg, causal=causal)
    real = (seg > 0)[:, None, :, None]
    weights = jnp.asarray(rng.normal(size=(3, 4, L, 16)), jnp.float32)

    def loss(q, k, v):  # through the real queries only, as every caller reads them
        out = attention.grouped_attention(q, k, v, mask, 0.25)
        return jnp.sum(jnp.where(real, out * weights, 0.0)), out

    grad = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)
    with attention.building_for("tpu"):
        assert "pallas_call" in str(jax.make_jaxpr(loss)(q, k, v))
    assert "pallas_call" not in str(jax.make_jaxpr(lambda *a: loss(*a))(q, k, v))  # this CPU: the XLA path
    (value, out), grads = on_tpu_path(grad, q, k, v)
    (ref_value, ref_out), ref_grads = grad(q, k, v)
    real = np.broadcast_to(np.asarray(real), out.shape)
    np.testing.assert_allclose(np.asarray(out)[real], np.asarray(ref_out)[real], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(value), float(ref_value), rtol=1e-5)
    for ours, theirs in zip(grads, ref_grads):
        scale = float(np.abs(np.asarray(theirs)).max())
        assert float(np.abs(np.asarray(ours) - np.asarray(theirs)).max()) <= 1e-5 * scale


def test_short_sequences_take_the_xla_path():
    seg = jnp.ones((1, 64), jnp.int32)
    x = jnp.ones((1, 2, 64, 16))
    mask = attention.SegmentMask(jnp.ones((1, 1, 64, 64), bool), seg, seg)
    with attention.building_for("tpu"):
        assert "pallas_call" not in str(jax.make_jaxpr(lambda x: attention.dot_product_attention(x, x, x, mask, 1.0))(x))


@pytest.mark.slow  # 17 s on 2 cores
@pytest.mark.parametrize("kind", ["gpt2", "llama", "roberta"])
def test_the_models_segment_ids_mean_their_masks(kind, tmp_path):
    """Padded rows (left-padded for the causal LMs, right for RoBERTa) and packed rows: the hidden
    states of every real token on the TPU path equal this CPU's."""
    model = (models.load_roberta if kind == "roberta" else models.load_causal_lm)(models.build_tiny(kind, tmp_path))
    rng = np.random.default_rng(1)
    lengths = [100, 128, 7]
    ids = rng.integers(3, 200, (3, L)).astype(np.int32)
    valid = np.arange(L)[None] >= L - np.array(lengths)[:, None]  # left padding
    if kind == "roberta":
        valid = valid[:, ::-1]
    packed = pack([row[m] for row, m in zip(ids, valid)][::-1][1:] + [ids[2, :30], ids[0, :40]], 0, max_length=L)
    assert packed.ids.shape[1] == L and packed.ids.shape[0] < 4  # sequences share rows

    def padded():
        out = model(jnp.asarray(ids), jnp.asarray(valid, jnp.int32))
        return out.last_hidden_state if kind == "roberta" else out.hidden_state

    def packed_rows():
        out = model(jnp.asarray(packed.ids), segment_ids=jnp.asarray(packed.segments),
                    position_ids=jnp.asarray(packed.positions))
        return out.last_hidden_state if kind == "roberta" else out.hidden_state

    for hidden, real in ((padded, valid), (packed_rows, packed.segments > 0)):
        ours, reference = on_tpu_path(jitted(hidden)), jitted(hidden)()
        np.testing.assert_allclose(np.asarray(ours)[real], np.asarray(reference)[real], rtol=2e-5, atol=2e-5)
