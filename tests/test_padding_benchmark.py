"""benchmarks/padding.py's fractions, against a count by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tests.benchmark_scripts import imported


@pytest.fixture(scope="module")
def padding():
    yield from imported("padding")


def test_padding_fractions_count_the_pad_positions(padding):
    # Batch 1: rows of 10 and 20 tokens pad to the 32 bucket (64 positions, 30 real); batch 2: rows
    # of 40 and 300 tokens, the longer cut to the 256 limit, pad to 256 (512 positions, 296 real).
    r = padding.fractions([np.array([10, 20]), np.array([40, 300])], max_length=256, min_bucket=16)
    assert r["bucketed"] == pytest.approx(1 - 326 / (64 + 512))
    assert r["to_longest"] == pytest.approx(1 - 326 / (2 * 20 + 2 * 256))
    assert r["mean_tokens"] == pytest.approx(326 / 4)
    assert r["mean_bucket"] == pytest.approx((64 + 512) / 4)


def test_the_paper_workload_draws_real_lengths(padding):
    import workload

    w = workload.workloads()["paper"]
    d = workload.transition_lengths(w, np.random.default_rng(0))
    assert d["observation"].shape == (w.transitions,)
    assert set(np.unique(d["observation"])) <= {w.prompt_length(t) for t in range(w.turns)}
    np.testing.assert_array_equal(d["next_observation"] - d["observation"], w.turn_growth)
