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


def test_the_iteration_workload_at_real_lengths(padding):
    """iteration.py's learner samples at a replay's lengths: every observation of a turn's length
    (policy ids; critic rows with <s> and </s>), s' one turn longer, utterances of 6 to 16 tokens;
    the fixed workload keeps its arrays of ``observation`` tokens."""
    import workload

    sizes = workload.workloads()
    w = sizes["base"]
    data = workload.make_data(w, lengths=sizes["paper"])
    turns = {sizes["paper"].prompt_length(t) for t in range(sizes["paper"].turns)}
    assert data.real_lengths and data.lengths == "paper" and len(data.critic_samples) == w.critic_epochs
    for sample in data.critic_samples + data.actor_samples:
        policy = np.array([len(r) for r in sample["policy_observation"]])
        assert len(policy) == w.transitions and set(policy) <= turns
        np.testing.assert_array_equal([len(r) for r in sample["observation"]], policy + 2)
        assert all(r[0] == 0 and r[-1] == 2 for r in sample["observation"])
        assert 6 <= sample["pi_length"].min() and sample["pi_length"].max() <= 16
    critic = data.critic_samples[0]
    np.testing.assert_array_equal([len(r) for r in critic["next_observation"]],
                                  [len(r) + sizes["paper"].turn_growth for r in critic["observation"]])
    assert {len(r) - 2 for r in critic["action"]} <= set(range(6, 17))
    fixed = workload.make_data(w)
    assert not fixed.real_lengths and fixed.critic_samples[0]["observation"].shape == (w.transitions, w.observation)


def test_the_reference_pads_each_micro_batch_to_its_longest(padding):
    pytest.importorskip("torch")
    import reference_torch

    ids, mask = reference_torch.padded([np.array([5, 6, 7]), np.array([8])], 1)
    np.testing.assert_array_equal(ids, [[5, 6, 7], [8, 1, 1]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [1, 0, 0]])
    ids, mask = reference_torch.padded([np.array([5, 6, 7]), np.array([8])], 0, left=True)
    np.testing.assert_array_equal(ids, [[5, 6, 7], [0, 0, 8]])
    np.testing.assert_array_equal(mask, [[1, 1, 1], [0, 0, 1]])


def test_real_length_flops_count_each_rows_own_tokens(padding):
    """At one length for every row, the real-length count is the fixed workload's (whose rows are
    ``observation`` tokens and actions ``new_tokens``), but for a_π's critic row, which holds <s>
    and </s> besides its tokens at real lengths."""
    import dataclasses

    import workload

    w = dataclasses.replace(workload.workloads()["tiny"], observation=40, new_tokens=8)
    n = w.transitions
    rows = lambda k: [np.zeros(k, np.int32)] * n  # noqa: E731
    sample = lambda k: dict(observation=rows(40), action=rows(8), next_observation=rows(40),  # noqa: E731
                            pi_length=np.full(n, k), policy_observation=rows(40))
    fixed = workload.step_flops(w)
    # a_π of 6 tokens: a critic row of 8, as the fixed critic step's.
    assert workload.real_step_flops(w, workload.Data([], [sample(6)], [sample(6)], "tiny"))["critic"] == \
        pytest.approx(fixed["critic"])
    # a_π of 8 tokens: the policy's as the fixed actor step's, the critic's a_π row 2 longer.
    extra = n * (workload.forward_flops(w.critic, 1, 10) - workload.forward_flops(w.critic, 1, 8))
    assert workload.real_step_flops(w, workload.Data([], [sample(8)], [sample(8)], "tiny"))["actor"] == \
        pytest.approx(fixed["actor"] + extra)
