"""A learner phase's ``a_π`` in a few large decodes instead of one small decode per step.

Within ArCHer's critic phase neither the policy nor the replay buffer changes, so the ``a_π`` of
all its steps can be drawn at once: each row keeps the key and row id
its own step would have given it (:func:`archer_jax.sampling.decoding.row_uniforms`), so every
row draws what it would have drawn in its step's own decode, up to the rounding of logits
computed in a differently shaped batch.

    rows = decode_rows(sampler.decoder, sampling, prompt_length=128, least=256, most=12_800)
    generation = generate_many(sampler, prompts, keys, row_ids, sampling, max_rows=rows)

:func:`generate_many` sorts the rows by prompt length (so a decode's prompt bucket is that of
rows of like length), cuts them into decodes of at most ``max_rows`` rows (powers of two, so
that no decode pads rows), dispatches them all before it fetches any (the device runs them back
to back while the host cuts the texts of the ones before) and returns one :class:`Generation` in
the rows' order.
:func:`decode_rows` picks ``max_rows`` from the device's free memory, as a learner step's
``micro_batch_size="auto"`` does: the memory XLA assigns to one decode of ``least`` rows, read
from its compiled programs, grows with its rows.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax.learners import micro_batching
from archer_jax.models.tokenizer import Tokens, bucket_length
from archer_jax.sampling.decoding import Decoder, SamplingParams
from archer_jax.sampling.sampler import Generation, Sampler


_MEASURED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # decoder -> {(sampling, rows, length): bytes}


def _decode_bytes(decoder: Decoder, sampling: SamplingParams, rows: int, prompt_length: int) -> int | None:
    """Per-device bytes one decode of ``rows`` rows at ``prompt_length`` adds to the resident
    parameters: the prefill's temporaries and its output state (the KV cache), or the state and
    the decode loop's temporaries, whichever is more. None where the backend gives no analysis.
    Measured once per decoder and shape."""
    measured = _MEASURED.setdefault(decoder, {})
    signature = (sampling, rows, prompt_length)
    if signature not in measured:
        measured[signature] = _compiled_bytes(decoder, sampling, rows, prompt_length)
    return measured[signature]


def _compiled_bytes(decoder: Decoder, sampling: SamplingParams, rows: int, prompt_length: int) -> int | None:
    prefill, decode = (lowered.compile() for lowered in decoder.lower(sampling, rows, prompt_length))
    prefill_bytes = micro_batching.program_bytes(prefill, 0)
    decode_bytes = micro_batching.program_bytes(decode, 0)
    analysis = decode.memory_analysis()
    if prefill_bytes is None or decode_bytes is None or analysis is None:
        return None
    return max(prefill_bytes, decode_bytes + int(analysis.argument_size_in_bytes))


def decode_rows(decoder: Decoder, sampling: SamplingParams, *, prompt_length: int, least: int, most: int,
                free_bytes: int | None = None) -> int:
    """The most rows (a power of two, at least ``least``'s row bucket, at most ``most``'s) one
    decode at ``prompt_length`` may take in :data:`micro_batching.HEADROOM` of the free memory
    (``free_bytes``, default: the decoder's devices'). The bytes of a decode of ``least`` rows are
    read from its compiled programs and scaled by rows (a decode's cache and activations are
    rows times a row's); the decode chosen is compiled when it first runs."""
    low, high = decoder.batch_bucket(max(1, least)), decoder.batch_bucket(max(1, most))
    if high <= low:
        return low
    if free_bytes is None:
        free_bytes = micro_batching.device_free_bytes(list(decoder.mesh.devices.flat))
    measured = _decode_bytes(decoder, sampling, low, prompt_length) if free_bytes is not None else None
    if measured is None:
        return low
    budget = micro_batching.HEADROOM * free_bytes
    rows = low
    while rows * 2 <= high and measured * (rows * 2) / low <= budget:
        rows *= 2
    return rows


def decode_sizes(rows: int, max_rows: int, least: int = 1) -> list[int]:
    """The rows of each decode of ``rows``: powers of two, each the largest left that is at most
    ``max_rows`` (so that no decode pads its rows to a row bucket), the rest under ``least`` in one."""
    sizes, left = [], rows
    while left > 0:
        size = min(max_rows, 1 << (left.bit_length() - 1))
        size = left if size < least else size
        sizes.append(size)
        left -= size
    return sizes


def _chunks(order: np.ndarray, max_rows: int, least: int) -> list[np.ndarray]:
    """``order`` cut into the runs of :func:`decode_sizes`."""
    ends = np.cumsum([0, *decode_sizes(len(order), max_rows, least)])
    return [order[a:b] for a, b in zip(ends[:-1], ends[1:])]


def generate_many(sampler: Sampler, rows: Sequence[np.ndarray], keys: jax.Array, row_ids: Sequence[int],
                  sampling: SamplingParams, *, model_state: nnx.State | None = None,
                  max_rows: int, least: int = 1) -> Generation:
    """:meth:`Sampler.generate_rows` for many prompt rows (unpadded policy ids), row ``i`` with
    its own key ``keys[i]`` and row id ``row_ids[i]``, in decodes of at most ``max_rows`` rows
    (sorted by prompt length; powers of two, the rest under ``least`` in one decode); one
    :class:`Generation` in the rows' order, its prompts left-padded to the longest one's bucket."""
    n = len(rows)
    if n == 0:
        raise ValueError("rows is empty: nothing to generate from")
    if keys.shape != (n,):
        raise ValueError(f"keys has shape {keys.shape}, expected ({n},): one key per row")
    row_ids = np.asarray(row_ids, np.int64)
    if row_ids.shape != (n,):
        raise ValueError(f"row_ids has shape {row_ids.shape}, expected ({n},): one id per row")
    limit = sampler.prompt_limit(sampling)
    order = np.argsort([min(len(r), limit) for r in rows], kind="stable")
    pending = []
    for chunk in _chunks(order, max(1, max_rows), least):
        encoded = sampler.encode_rows([rows[i] for i in chunk], sampling)
        out = sampler.generate_tokens(encoded.input_ids, encoded.attention_mask, keys[jnp.asarray(chunk)], sampling,
                                      model_state=model_state, row_ids=row_ids[chunk])
        pending.append((chunk, encoded, out))  # dispatched: the device runs the decodes back to back
    parts = [(chunk, sampler.fetch(out, sampling, encoded)) for chunk, encoded, out in pending]
    return _in_order(sampler, sampling, parts, n)


def _in_order(sampler: Sampler, sampling: SamplingParams, parts: list[tuple[np.ndarray, Generation]],
              n: int) -> Generation:
    """The decodes' generations joined into one in the rows' order."""
    at = np.empty(n, np.int64)
    at[np.concatenate([chunk for chunk, _ in parts])] = np.arange(n)
    joined = [np.concatenate([getattr(g, name) for _, g in parts])[at]
              for name in ("tokens", "lengths", "logprobs", "sample_logprobs")]
    texts = [t for _, g in parts for t in g.texts]
    reasons = [r for _, g in parts for r in g.finish_reasons]
    prompts = [ids[mask == 1] for _, g in parts for ids, mask in zip(g.prompt.input_ids, g.prompt.attention_mask)]
    prompt = sampler.encode_rows([prompts[i] for i in at], sampling)
    return Generation([texts[i] for i in at], *joined, [reasons[i] for i in at], prompt)


def _empty(sampling: SamplingParams) -> Generation:
    """A generation of no rows."""
    new = sampling.max_new_tokens
    return Generation([], np.zeros((0, new), np.int32), np.zeros(0, np.int32), np.zeros((0, new), np.float32),
                      np.zeros((0, new), np.float32), [], Tokens(np.zeros((0, 0), np.int32), np.zeros((0, 0), np.int32)))


def rows_of(generation: Generation, rows: slice) -> Generation:
    """The generation of a run of its rows (their prompts keep the joined padding)."""
    return Generation(generation.texts[rows], *(getattr(generation, name)[rows] for name in
                                                 ("tokens", "lengths", "logprobs", "sample_logprobs")),
                      generation.finish_reasons[rows], Tokens(*(a[rows] for a in generation.prompt)))


def phase_rows(sampler: Sampler, sampling: SamplingParams, rows: Sequence[np.ndarray], least: int) -> int:
    """The most rows a decode of a phase's ``rows`` (``least`` of them a step's) takes: as many
    as fit (:func:`decode_rows`, at the longest prompt's bucket), but one step's on CPUs, where
    larger decodes ran slower (each row computes until its decode's longest row ends), as larger
    learner micro-batches do (:func:`micro_batching.auto_limit`)."""
    limit = sampler.prompt_limit(sampling)
    longest = max(min(len(r), limit) for r in rows)
    cpu = micro_batching.auto_limit(sampler.mesh.devices.flat[0].platform, least) is not None
    length = bucket_length(longest, limit, min(sampler.min_prompt_bucket, limit))
    return decode_rows(sampler.decoder, sampling, prompt_length=length, least=least, most=least if cpu else len(rows))


def generate_steps(sampler: Sampler, prompts: Sequence[Sequence[np.ndarray]], keys: Sequence[jax.Array],
                   row_ids: Sequence[Sequence[int]], sampling: SamplingParams, *,
                   model_state: nnx.State | None = None) -> list[Generation]:
    """The generations of several steps' prompts at once: step ``s``'s rows with its key
    ``keys[s]`` and its row ids ``row_ids[s]``, as ``sampler.generate_rows(prompts[s], keys[s],
    row_ids=row_ids[s])`` would draw them, in decodes of the rows that fit (:func:`decode_rows`)."""
    sizes = [len(p) for p in prompts]
    if len(keys) != len(sizes) or [len(r) for r in row_ids] != sizes:
        raise ValueError(f"prompts, keys and row_ids must give one entry per step: {len(sizes)}, {len(keys)}, "
                         f"{len(row_ids)}")
    rows = [row for step in prompts for row in step]
    if not rows:
        return [_empty(sampling) for _ in sizes]
    max_rows = phase_rows(sampler, sampling, rows, max(sizes))
    step_keys = jnp.repeat(jnp.stack(list(keys)), np.asarray(sizes), axis=0, total_repeat_length=len(rows))
    joined = generate_many(sampler, rows, step_keys, np.concatenate([np.asarray(r, np.int64) for r in row_ids]),
                           sampling, model_state=model_state, max_rows=max_rows, least=max(sizes))
    ends = np.cumsum([0, *sizes])
    return [rows_of(joined, slice(int(a), int(b))) for a, b in zip(ends[:-1], ends[1:])]
