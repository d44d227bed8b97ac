"""A phase's a_π in a few large decodes: the same tokens as each step's own decode, the policy's
distribution, decodes sized by free memory, and clear errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from archer_jax.sampling import SamplingParams, phase_decodes
from tests.sampling.test_sampling import PROMPTS, log_softmax, policy, sampler  # noqa: F401 (fixtures)
from tests import hf_reference as ref

SAMPLING = SamplingParams(max_new_tokens=6, temperature=1.3, stop_strings=("\n",))


def _steps(tokenizer, sizes):
    """Policy-id prompts of several lengths, ``sizes[s]`` for step s."""
    rows = [np.asarray(tokenizer(p, add_special_tokens=False)["input_ids"], np.int32) for p in PROMPTS]
    return [[rows[(3 * s + i) % len(rows)] for i in range(n)] for s, n in enumerate(sizes)]


def test_a_phase_draws_what_each_steps_own_decode_draws(policy, sampler):  # noqa: F811
    """Rows sorted by length and cut into decodes of 4 (then the rest of 3) keep their step's key and row id."""
    _, _, tokenizer = policy
    prompts = _steps(tokenizer, [5, 7, 3])
    keys = [jax.random.fold_in(jax.random.key(7), s) for s in range(3)]
    ids = [range(len(p)) for p in prompts]
    each = [sampler.generate_rows(p, k, SAMPLING, row_ids=i) for p, k, i in zip(prompts, keys, ids)]
    rows = [r for p in prompts for r in p]
    joined = phase_decodes.generate_many(
        sampler, rows, jax.numpy.repeat(jax.numpy.stack(keys), np.array([5, 7, 3]), axis=0, total_repeat_length=15),
        np.concatenate([np.arange(n) for n in (5, 7, 3)]), SAMPLING, max_rows=4, least=4)
    assert {len(p) for p in rows} != {len(rows[0])}  # prompts of several lengths, so the sort reorders
    ends = np.cumsum([0, 5, 7, 3])
    batched = [phase_decodes.rows_of(joined, slice(a, b)) for a, b in zip(ends[:-1], ends[1:])]
    assert [g.texts for g in phase_decodes.generate_steps(sampler, prompts, keys, ids, SAMPLING)] == [g.texts for g in each]
    for one, many in zip(each, batched, strict=True):
        assert many.texts == one.texts and many.finish_reasons == one.finish_reasons
        np.testing.assert_array_equal(many.tokens, one.tokens)
        np.testing.assert_array_equal(many.lengths, one.lengths)
        np.testing.assert_allclose(many.logprobs, one.logprobs, rtol=1e-5, atol=1e-6)
        for a, b in zip(many.prompt, one.prompt):  # the prompts as the model saw them, unpadded
            assert [list(r[m == 1]) for r, m in zip(a, many.prompt.attention_mask)] == \
                   [list(r[m == 1]) for r, m in zip(b, one.prompt.attention_mask)]
    assert len({g.texts[0] for g in each}) > 1 or len(set(each[1].texts)) > 1  # the draws are not all alike


def test_a_phase_samples_the_tempered_softmax(policy, sampler):  # noqa: F811
    """4 steps of 512 rows of one prompt, drawn in decodes of 512: a chi-square test of the first
    tokens against the model's tempered softmax (Hugging Face's logits); the same draws reject
    the untempered one."""
    hf, _, tokenizer = policy
    sampling = SamplingParams(max_new_tokens=1, temperature=1.6)
    row = np.asarray(tokenizer("Is it", add_special_tokens=False)["input_ids"], np.int32)
    prompts = [[row] * 512 for _ in range(4)]
    keys = [jax.random.fold_in(jax.random.key(3), s) for s in range(4)]
    joined = phase_decodes.generate_many(
        sampler, [r for p in prompts for r in p], jax.numpy.repeat(jax.numpy.stack(keys), 512, axis=0),
        np.tile(np.arange(512), 4), sampling, max_rows=512, least=256)
    logits = ref.gpt2_logits(hf, row[None], np.ones((1, len(row)), np.int32))[0, -1]
    draws = len(joined.texts)
    counts = np.bincount(joined.tokens[:, 0], minlength=len(logits))

    def p_value(probs):
        order = np.argsort(probs)[::-1]
        big = order[probs[order] * draws >= 5]
        rest = np.setdiff1d(np.arange(len(probs)), big)
        observed = np.append(counts[big], counts[rest].sum())
        expected = np.append(probs[big], probs[rest].sum()) * draws
        return stats.chisquare(observed, expected).pvalue

    assert p_value(np.exp(log_softmax(logits / 1.6))) > 1e-3
    assert p_value(np.exp(log_softmax(logits))) < 1e-6


def test_decodes_take_the_rows_that_fit_in_free_memory(sampler):  # noqa: F811
    """One decode of 8 rows is measured; the rows double while the scaled bytes fit in 90% of free."""
    one = phase_decodes._decode_bytes(sampler.decoder, SAMPLING, 8, 64)
    assert one is not None and one > 0
    choose = lambda free: phase_decodes.decode_rows(sampler.decoder, SAMPLING, prompt_length=64, least=8, most=100,  # noqa: E731
                                                    free_bytes=free)
    assert choose(1) == 8  # nothing fits: the smallest
    assert choose(10**15) == 128  # everything fits: the bucket of all rows
    assert choose(int(4 * one / 0.9) + 1) == 32
    assert phase_decodes.decode_rows(sampler.decoder, SAMPLING, prompt_length=64, least=8, most=8) == 8


def test_bad_input_gives_clear_errors(policy, sampler):  # noqa: F811
    _, _, tokenizer = policy
    prompts = _steps(tokenizer, [2, 3])
    keys = [jax.random.key(0)] * 2
    with pytest.raises(ValueError, match="one entry per step"):
        phase_decodes.generate_steps(sampler, prompts, keys[:1], [range(2), range(3)], SAMPLING)
    rows = prompts[0]
    with pytest.raises(ValueError, match=r"keys has shape \(1,\), expected \(2,\)"):
        phase_decodes.generate_many(sampler, rows, jax.numpy.stack(keys[:1]), [0, 1], SAMPLING, max_rows=4)
    with pytest.raises(ValueError, match="rows is empty"):
        phase_decodes.generate_many(sampler, [], jax.numpy.stack(keys), [], SAMPLING, max_rows=4)
    assert [g.texts for g in phase_decodes.generate_steps(sampler, [[], []], keys, [[], []], SAMPLING)] == [[], []]


def test_decode_sizes_are_powers_of_two_with_one_rest():
    assert phase_decodes.decode_sizes(12_800, 4096, 256) == [4096, 4096, 4096, 512]
    assert phase_decodes.decode_sizes(320, 512, 32) == [256, 64]
    assert phase_decodes.decode_sizes(100, 128, 8) == [64, 32, 4]  # the 4 left, under 8, in one decode
    assert phase_decodes.decode_sizes(15, 4, 4) == [4, 4, 4, 3]
