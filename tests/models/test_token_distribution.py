"""The top-k and nucleus cuts against a NumPy re-derivation by sorting."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from archer_jax.models import token_distribution as td


def sorted_nucleus(x: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of most likely tokens whose mass reaches ``top_p`` (ties at its edge kept)."""
    probs = np.exp(x - x.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    order = np.sort(probs, -1)[:, ::-1]
    edge = np.argmax(np.cumsum(order, -1) >= top_p, -1)  # index of the last token needed
    return probs >= np.take_along_axis(order, edge[:, None], -1)


@pytest.mark.parametrize("vocab, scale", [(866, 1.0), (50257, 3.0), (50257, 0.3)])
def test_the_cuts_keep_what_sorting_keeps(vocab, scale):
    """The tiny and GPT-2 vocabularies, logits of a few units and of a few tenths, and a peaked
    row beside flat ones in one batch."""
    x = np.asarray(jax.random.normal(jax.random.key(vocab), (6, vocab)), np.float64) * scale
    x[1] *= 10.0  # a peaked row beside flat ones
    x32 = x.astype(np.float32)
    for top_p in (0.5, 0.9):
        want = sorted_nucleus(x32.astype(np.float64), top_p)
        got = np.asarray(td.kept(x32, td.TokenDistribution(top_p=top_p)))
        np.testing.assert_array_equal(got, want)
    for k in (1, 40):
        kth = np.sort(x32, -1)[:, -k][:, None]
        np.testing.assert_array_equal(np.asarray(td.kept(x32, td.TokenDistribution(top_k=k))), x32 >= kth)
