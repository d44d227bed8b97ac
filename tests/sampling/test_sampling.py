"""The batched sampler against Hugging Face's PyTorch GPT-2 (generate and full forward passes)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from scipy import stats

from archer_jax import models
from archer_jax.models import tiny
from archer_jax.runtime import sharding
from archer_jax.sampling import Sampler, SamplingParams, stop_token_table
from archer_jax.sampling.decoding import row_keys
from tests import hf_reference as ref

torch = ref.torch

PROMPTS = [
    "Questions:\nIs it an animal? Yes.\n",
    "Is it",
    "Questions:\nIs it made of metal? No.\nIs it a fruit? Yes.\n",
    "Go north",
    "Seoul",
    "banana",
    "Is it bigger than a breadbox?",
]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A random tiny HF GPT-2 on the offline tiny tokenizer, saved and loaded as ours.

    The newline token's embedding is scaled up so that greedy decoding ends some rows at
    ``"\\n"`` and runs others to ``max_new_tokens``.
    """
    directory = tmp_path_factory.mktemp("policy")
    tokenizer = tiny.train_tokenizer("gpt2", directory)
    eos = tokenizer.eos_token_id
    hf = ref.gpt2(seed=0, vocab_size=len(tokenizer), n_positions=128, bos_token_id=eos, eos_token_id=eos)
    newline = np.flatnonzero(stop_token_table(tokenizer, ["\n"], len(tokenizer)))
    with torch.no_grad():
        hf.transformer.wte.weight[torch.tensor(newline)] *= 3.0
    hf.save_pretrained(directory)
    model = models.load_gpt2(directory)
    tokenizer = models.load_tokenizer(directory)
    return hf, model, tokenizer


@pytest.fixture(scope="module")
def sampler(policy):
    _, model, tokenizer = policy
    return Sampler(model, tokenizer)


def packed(generation):
    """Prompt + sampled tokens as one left-padded sequence (ids, mask) for a full forward pass."""
    prompt = generation.prompt
    new_mask = (np.arange(generation.tokens.shape[1])[None] < generation.lengths[:, None]).astype(np.int32)
    ids = np.concatenate([prompt.input_ids, generation.tokens], axis=1)
    mask = np.concatenate([prompt.attention_mask, new_mask], axis=1)
    return ids, mask


def next_token_logits(hf, generation) -> np.ndarray:
    """HF logits that predicted each sampled token: ``[batch, max_new_tokens, vocab]``."""
    ids, mask = packed(generation)
    logits = ref.gpt2_logits(hf, ids, mask)
    start = generation.prompt.input_ids.shape[1] - 1
    return logits[:, start : start + generation.tokens.shape[1]]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_greedy_matches_hugging_face_generate(policy, sampler):
    hf, _, tokenizer = policy
    params = SamplingParams(max_new_tokens=12, greedy=True)
    out = sampler.generate(PROMPTS, jax.random.key(0), params)

    stop_ids = [int(i) for i in np.flatnonzero(stop_token_table(tokenizer, ["\n"], len(tokenizer)))]
    with torch.no_grad():
        generated = hf.generate(
            input_ids=torch.tensor(out.prompt.input_ids, dtype=torch.long),
            attention_mask=torch.tensor(out.prompt.attention_mask, dtype=torch.long),
            do_sample=False,
            max_new_tokens=12,
            eos_token_id=stop_ids + [tokenizer.eos_token_id],
            pad_token_id=tokenizer.pad_token_id,
        )
    expected = generated[:, out.prompt.input_ids.shape[1] :].numpy()
    for i in range(len(PROMPTS)):
        stops = np.flatnonzero(np.isin(expected[i], stop_ids))
        n = int(stops[0]) + 1 if stops.size else 12
        np.testing.assert_array_equal(out.tokens[i, : out.lengths[i]], expected[i, :n], err_msg=f"row {i}")
        assert out.lengths[i] == n
        text = tokenizer.decode(expected[i, :n].tolist(), skip_special_tokens=True)
        assert out.texts[i] == text.split("\n")[0]
        assert out.finish_reasons[i] == ("stop" if stops.size else "length")
        assert (out.tokens[i, n:] == tokenizer.pad_token_id).all()
    # The test covers both kinds of rows, and the stop token is kept in the ids.
    assert {"stop", "length"} <= set(out.finish_reasons)
    stopped = out.finish_reasons.index("stop")
    assert out.tokens[stopped, out.lengths[stopped] - 1] in stop_ids


def test_logprobs_equal_a_full_forward_pass(policy, sampler):
    hf, _, _ = policy
    out = sampler.generate(PROMPTS, jax.random.key(1), SamplingParams(max_new_tokens=10))
    expected = log_softmax(next_token_logits(hf, out))
    expected = np.take_along_axis(expected, out.tokens[..., None].astype(np.int64), -1)[..., 0]
    valid = np.arange(10)[None] < out.lengths[:, None]
    assert np.abs(out.logprobs - expected)[valid].max() < 1e-4
    assert (out.logprobs[~valid] == 0).all()
    # At temperature 1 with no filter the sampling distribution is the model's.
    np.testing.assert_allclose(out.sample_logprobs, out.logprobs, atol=1e-6)


def test_sample_logprobs_are_under_the_tempered_filtered_distribution(policy, sampler):
    hf, _, _ = policy
    params = SamplingParams(max_new_tokens=6, temperature=0.7, top_k=20)
    out = sampler.generate(PROMPTS, jax.random.key(2), params)
    logits = next_token_logits(hf, out) / 0.7
    kth = np.sort(logits, -1)[..., -20][..., None]
    expected = log_softmax(np.where(logits >= kth, logits, -np.inf))
    expected = np.take_along_axis(expected, out.tokens[..., None].astype(np.int64), -1)[..., 0]
    valid = np.arange(6)[None] < out.lengths[:, None]
    assert np.abs(out.sample_logprobs - expected)[valid].max() < 1e-4


def test_first_token_frequencies_follow_the_tempered_softmax(policy, sampler):
    """A chi-square test at a fixed seed; the same draws reject the untempered softmax."""
    hf, _, tokenizer = policy
    temperature, draws = 1.6, 4096
    out = sampler.generate(["Is it"] * draws, jax.random.key(3), SamplingParams(max_new_tokens=1, temperature=temperature))
    logits = ref.gpt2_logits(hf, out.prompt.input_ids[:1], out.prompt.attention_mask[:1])[0, -1]
    counts = np.bincount(out.tokens[:, 0], minlength=len(logits))

    def p_value(probs):
        order = np.argsort(probs)[::-1]
        big = order[probs[order] * draws >= 5]  # bins with enough expected mass; the rest pooled
        rest = np.setdiff1d(np.arange(len(probs)), big)
        observed = np.append(counts[big], counts[rest].sum())
        expected = np.append(probs[big], probs[rest].sum()) * draws
        return stats.chisquare(observed, expected).pvalue

    tempered = np.exp(log_softmax(logits / temperature))
    assert len(set(out.tokens[:, 0].tolist())) > 20  # a spread-out distribution, not a near-argmax
    assert p_value(tempered) > 1e-3
    assert p_value(np.exp(log_softmax(logits))) < 1e-6


def test_top_k_never_leaves_the_top_k(policy, sampler):
    hf, _, _ = policy
    out = sampler.generate(PROMPTS * 8, jax.random.key(4), SamplingParams(max_new_tokens=8, top_k=3, temperature=2.0))
    logits = next_token_logits(hf, out)
    chosen = np.take_along_axis(logits, out.tokens[..., None].astype(np.int64), -1)[..., 0]
    third = np.sort(logits, -1)[..., -3]
    valid = np.arange(8)[None] < out.lengths[:, None]
    assert (chosen >= third - 1e-4)[valid].all()
    assert len(set(out.tokens[valid].tolist())) > 3  # it did sample, not just argmax


def test_top_p_stays_in_the_nucleus(policy, sampler):
    hf, _, _ = policy
    top_p = 0.5
    out = sampler.generate(PROMPTS * 8, jax.random.key(5), SamplingParams(max_new_tokens=8, top_p=top_p))
    logits = next_token_logits(hf, out)
    probs = np.exp(log_softmax(logits))
    sorted_probs = -np.sort(-probs, -1)
    mass_above = np.cumsum(sorted_probs, -1) - sorted_probs
    smallest_kept = np.where(mass_above < top_p, sorted_probs, np.inf).min(-1)
    chosen = np.take_along_axis(probs, out.tokens[..., None].astype(np.int64), -1)[..., 0]
    valid = np.arange(8)[None] < out.lengths[:, None]
    assert (chosen >= smallest_kept * (1 - 1e-4))[valid].all()


def test_randomness_is_per_row_and_reproducible(sampler):
    params = SamplingParams(max_new_tokens=8)
    batch = sampler.generate(PROMPTS, jax.random.key(6), params)
    again = sampler.generate(PROMPTS, jax.random.key(6), params)
    alone = sampler.generate(PROMPTS[:1], jax.random.key(6), params)
    other = sampler.generate(PROMPTS, jax.random.key(7), params)
    np.testing.assert_array_equal(batch.tokens, again.tokens)
    # Row 0's draw depends on its prompt and the key, not on the rows beside it.
    np.testing.assert_array_equal(batch.tokens[0], alone.tokens[0])
    assert not np.array_equal(batch.tokens, other.tokens)
    # Identical prompts in one batch still get different samples.
    same = sampler.generate(["Is it"] * 8, jax.random.key(6), params)
    assert len({tuple(row) for row in same.tokens.tolist()}) > 1


def test_row_ids_key_each_row_wherever_it_sits(sampler):
    """A row keyed by ``row_ids`` (a dialogue's game number) draws the same sample at any position
    and beside any other rows: what lets each host of a multi-host run play its own games."""
    params = SamplingParams(max_new_tokens=8)
    key = jax.random.key(3)
    ids = [3 * i + 20 for i in reversed(range(len(PROMPTS)))]
    batch = sampler.generate(PROMPTS, key, params, row_ids=ids)
    for i in range(len(PROMPTS)):
        alone = sampler.generate([PROMPTS[i]], key, params, row_ids=[ids[i]])
        np.testing.assert_array_equal(alone.tokens[0], batch.tokens[i])
    default = sampler.generate(PROMPTS, key, params)
    positional = sampler.generate(PROMPTS, key, params, row_ids=range(len(PROMPTS)))
    np.testing.assert_array_equal(default.tokens, positional.tokens)  # the default numbers rows by position
    assert not np.array_equal(default.tokens, batch.tokens)
    # Several samples of one prompt are numbered row_id * samples + j.
    fanned = sampler.generate(PROMPTS[:1], key, params, samples=3, row_ids=[4])
    for j in range(3):
        np.testing.assert_array_equal(fanned.tokens[j], sampler.generate(PROMPTS[:1], key, params, row_ids=[12 + j]).tokens[0])
    with pytest.raises(ValueError, match=r"row_ids has shape \(2,\), expected \(1,\)"):
        sampler.generate(PROMPTS[:1], key, params, row_ids=[1, 2])


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_rows_at_different_turns_draw_what_each_turns_batch_draws(sampler):
    """One key per row (``row_keys``: the turn's key of each row's dialogue): a batch whose rows are
    at different turns (continuous batching) samples each row as the batch of its own turn would,
    also with several samples per prompt."""
    params, prompts = SamplingParams(max_new_tokens=8), PROMPTS[:4]
    key, turns, ids = jax.random.key(5), [0, 3, 3, 7], [10, 11, 12, 13]
    mixed = sampler.generate(prompts, row_keys(key, turns), params, row_ids=ids)
    for i, turn in enumerate(turns):
        own = sampler.generate(prompts, jax.random.fold_in(key, turn), params, row_ids=ids)
        np.testing.assert_array_equal(mixed.tokens[i], own.tokens[i])
    fanned = sampler.generate(prompts[:2], row_keys(key, turns[:2]), params, samples=2, row_ids=ids[:2])
    own = sampler.generate(prompts[1:2], jax.random.fold_in(key, 3), params, samples=2, row_ids=ids[1:2])
    np.testing.assert_array_equal(fanned.tokens[2:], own.tokens)
    with pytest.raises(ValueError, match=r"key has shape \(2,\), expected \(\) or \(4,\)"):
        sampler.generate(prompts, row_keys(key, [0, 1]), params)


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_same_bucket_compiles_nothing_new(policy):
    _, model, tokenizer = policy
    sampler = Sampler(model, tokenizer)
    params = SamplingParams(max_new_tokens=4)
    sampler.generate(["Is it a dog?", "Seoul"], jax.random.key(0), params)
    traced = sampler.traces
    assert traced == 2  # one prefill, one decode
    sampler.generate(["Go north now", "banana split"], jax.random.key(1), params)  # same buckets
    sampler.generate(["x"], jax.random.key(2), params, model_state=sampler.model_state)  # rows 1 -> bucket 1: new
    assert sampler.traces == traced + 2
    sampler.generate(["y", "z"], jax.random.key(3), params)
    assert sampler.min_prompt_bucket == 64  # prompts shorter than 64 tokens share one bucket
    sampler.generate(["Questions:\n" * 40], jax.random.key(4), params)  # a longer prompt bucket: new
    assert sampler.traces == traced + 4


def test_model_state_argument_is_used(policy, sampler):
    """Sampling from other parameters (a training loop's latest) changes the output."""
    _, model, _ = policy
    params = SamplingParams(max_new_tokens=6, greedy=True)
    base = sampler.generate(PROMPTS, jax.random.key(0), params)
    scaled = jax.tree.map(lambda x: x * 1.5, sampler.model_state)
    other = sampler.generate(PROMPTS, jax.random.key(0), params, model_state=scaled)
    assert not np.array_equal(base.tokens, other.tokens)


def test_a_stop_string_split_across_tokens_is_found(policy, sampler):
    _, _, tokenizer = policy
    plain = sampler.generate(PROMPTS[:1], jax.random.key(8), SamplingParams(max_new_tokens=12, stop_strings=()))
    ids = plain.tokens[0].tolist()
    pieces = [tokenizer.decode([t]) for t in ids]
    # Two characters either side of the boundary after token j, found nowhere earlier.
    for j in range(1, len(ids) - 1):
        stop = pieces[j][-2:] + pieces[j + 1][:2]
        full = tokenizer.decode(ids)
        if len(pieces[j]) >= 2 and len(pieces[j + 1]) >= 2 and full.find(stop) == len(tokenizer.decode(ids[:j + 1])) - 2:
            break
    else:
        pytest.skip("no token boundary with a fresh 4-character string in this sample")
    out = sampler.generate(PROMPTS[:1], jax.random.key(8), SamplingParams(max_new_tokens=12, stop_strings=(stop,)))
    assert out.texts[0] == full[: full.find(stop)]
    assert out.lengths[0] == j + 2  # up to the token that completes the stop string
    np.testing.assert_array_equal(out.tokens[0, : j + 2], ids[: j + 2])
    assert out.finish_reasons[0] == "stop"


def test_over_long_prompts_keep_their_end(policy):
    _, model, tokenizer = policy
    sampler = Sampler(model, tokenizer, max_prompt_length=16)
    prompt = "Questions:\n" + "Is it a dog? No.\n" * 20
    out = sampler.generate([prompt, "Is it"], jax.random.key(0), SamplingParams(max_new_tokens=4))
    full = tokenizer(prompt)["input_ids"]
    assert out.prompt.input_ids.shape[1] == 16
    np.testing.assert_array_equal(out.prompt.input_ids[0], full[-16:])


def test_bad_input_gives_clear_errors(policy, sampler):
    _, model, tokenizer = policy
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="prompts is empty"):
        sampler.generate([], key)
    with pytest.raises(ValueError, match="max_new_tokens: must be > 0"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature: must be > 0"):
        SamplingParams(temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p: must be in \(0, 1\]"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="prompt 1 encodes to no tokens"):
        sampler.generate(["Is it", ""], key)
    too_long = np.ones((1, 125), np.int32)
    with pytest.raises(ValueError, match="a prompt has 125 tokens; at most 124 fit"):
        sampler.generate_tokens(too_long, too_long, key, SamplingParams(max_new_tokens=4))
    with pytest.raises(ValueError, match=r"max_prompt_length \(120\) \+ max_new_tokens \(32\) exceeds"):
        Sampler(model, tokenizer, max_prompt_length=120).generate(["Is it"], key)
    with pytest.raises(TypeError, match="one string"):
        sampler.generate("Is it", key)


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_sharded_over_a_mesh_gives_the_same_samples(policy, sampler):
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    _, model, tokenizer = policy
    mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
    sharded = Sampler(model, tokenizer, mesh=mesh)
    embedding = sharded.model_state["wte"]["embedding"]
    assert len(embedding.sharding.device_set) == 8 and not embedding.sharding.is_fully_replicated
    for params in (SamplingParams(max_new_tokens=8, greedy=True), SamplingParams(max_new_tokens=8, top_k=10)):
        one = sampler.generate(PROMPTS, jax.random.key(9), params)
        many = sharded.generate(PROMPTS, jax.random.key(9), params)
        np.testing.assert_array_equal(one.tokens, many.tokens)
        np.testing.assert_allclose(one.logprobs, many.logprobs, atol=1e-5)
        assert one.texts == many.texts
    state = sharded.generate_tokens(many.prompt.input_ids, many.prompt.attention_mask, jax.random.key(0))
    assert state.tokens.shape[0] % 4 == 0 and len(state.tokens.sharding.device_set) == 8


def test_generate_rows_equals_generate_on_the_texts(policy, sampler):
    """Prompts kept as token id rows (the replay buffer's) sample exactly what their texts do."""
    _, _, tokenizer = policy
    prompts = ["Questions:\n", "Questions:\nIs it alive? Yes.\nIs it an animal? No.\n", "Is it"]
    params = SamplingParams(max_new_tokens=6, temperature=0.9, top_k=40)
    key = jax.random.key(5)
    from_texts = sampler.generate(prompts, key, params)
    rows = [np.asarray(tokenizer(p)["input_ids"], np.int32) for p in prompts]
    from_rows = sampler.generate_rows(rows, key, params)
    assert from_rows.texts == from_texts.texts
    np.testing.assert_array_equal(from_rows.tokens, from_texts.tokens)
    np.testing.assert_array_equal(from_rows.prompt.input_ids, from_texts.prompt.input_ids)
    with pytest.raises(ValueError, match="rows is empty"):
        sampler.generate_rows([], key, params)


def test_several_samples_per_prompt_equal_the_prompts_repeated(sampler):
    """``samples=k`` runs each prompt once and fans its cache out: the draws (prompt-major) and
    their log-probs are those of the prompts repeated k times in one batch."""
    prompts = ["Questions:\n", "Questions:\nIs it alive? Yes.\n", "Is it"]
    params = SamplingParams(max_new_tokens=6, temperature=0.9)
    key = jax.random.key(8)
    fanned = sampler.generate(prompts, key, params, samples=3)
    repeated = sampler.generate([p for p in prompts for _ in range(3)], key, params)
    assert len(fanned.texts) == 9 and fanned.texts == repeated.texts
    np.testing.assert_array_equal(fanned.tokens, repeated.tokens)
    np.testing.assert_allclose(fanned.logprobs, repeated.logprobs, atol=1e-5)
    assert len({tuple(r) for r in fanned.tokens[:3].tolist()}) > 1  # a prompt's samples differ
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        sampler.generate(prompts, key, params, samples=0)


def test_greedy_and_sampled_calls_share_their_programs(policy):
    _, model, tokenizer = policy
    sampler = Sampler(model, tokenizer)
    sampled = SamplingParams(max_new_tokens=4, temperature=0.7, top_p=0.9)
    greedy = SamplingParams(max_new_tokens=4, temperature=0.7, top_p=0.9, greedy=True)
    first = sampler.generate(["Is it a dog?", "Seoul"], jax.random.key(0), greedy)
    assert sampler.traces == 2  # one prefill, one decode
    sampler.generate(["Is it a cat?", "Paris"], jax.random.key(1), sampled)
    assert sampler.traces == 2  # the same two programs
    again = sampler.generate(["Is it a dog?", "Seoul"], jax.random.key(2), greedy)
    np.testing.assert_array_equal(first.tokens, again.tokens)  # greedy ignores the key
    assert (first.sample_logprobs == 0).all()


def test_decode_chunks_give_the_same_tokens(policy, sampler):
    """Checking for finished rows every 3 or 8 tokens (a GPU's default) instead of every token
    samples the same ids with the same log-probs, bit for bit: a row that stops mid-chunk, the
    rows that run to ``max_new_tokens`` (9 is no multiple of either chunk) and a greedy call."""
    _, model, tokenizer = policy
    key = jax.random.key(11)
    for params in (SamplingParams(max_new_tokens=9, temperature=0.7, top_p=0.9), SamplingParams(max_new_tokens=9, greedy=True)):
        want = sampler.generate(PROMPTS, key, params)
        assert {"stop", "length"} <= set(want.finish_reasons)  # rows that end early and rows cut at the limit
        for chunk in (3, 8):
            chunked = Sampler(model, tokenizer).generate(PROMPTS, key, dataclasses.replace(params, decode_chunk=chunk))
            np.testing.assert_array_equal(chunked.tokens, want.tokens)
            np.testing.assert_array_equal(chunked.lengths, want.lengths)
            np.testing.assert_array_equal(chunked.logprobs, want.logprobs)
            np.testing.assert_array_equal(chunked.sample_logprobs, want.sample_logprobs)
            assert chunked.texts == want.texts
    with pytest.raises(ValueError, match="decode_chunk: must be >= 0"):
        SamplingParams(decode_chunk=-1)
