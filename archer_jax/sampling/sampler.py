"""Batched text generation from a causal-LM policy (GPT-2, Llama, Mistral, Qwen2): prompts in, actions out.

    sampler = Sampler(policy, tokenizer, mesh=mesh)
    out = sampler.generate(observations, jax.random.key(0), SamplingParams(max_new_tokens=32))
    out.texts       # actions, cut before the first stop string
    out.tokens      # [batch, max_new_tokens] sampled ids, the stop token included
    out.logprobs    # log pi(token | prefix) under the model, 0 past each row's length

This is the host side: tokenizing the prompts (left truncation and padding), the table of stop
tokens, and turning the sampled ids into texts cut at the first stop string (also one that
straddles two tokens) with their finish reasons. The sampling itself, one jitted prefill and one
jitted decode loop on token ids, is :class:`archer_jax.sampling.decoding.Decoder`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from archer_jax.models.tokenizer import Tokens, encode, pad_rows
from archer_jax.runtime import sharding as shd
from archer_jax.sampling.decoding import Array, Decoder, SampledTokens, SamplingParams


class Generation(NamedTuple):
    """Host-side result of :meth:`Sampler.generate` (one row per prompt)."""

    texts: list[str]  # the action text, cut before the first stop string
    tokens: np.ndarray  # [batch, max_new_tokens] int32, pad id past each row's length
    lengths: np.ndarray  # [batch] int32, sampled tokens kept (the stop token included)
    logprobs: np.ndarray  # [batch, max_new_tokens] float32: log softmax(logits)[token], 0 past length
    sample_logprobs: np.ndarray  # the same under the distribution actually sampled (0 when greedy)
    finish_reasons: list[str]  # "stop" (a stop string), "eos", or "length" (max_new_tokens)
    prompt: Tokens  # the prompts as the model saw them (one row each; with several samples per prompt
    # the rows above are prompt-major): left-padded, left-truncated


def stop_token_table(tokenizer, stop_strings: Sequence[str], vocab_size: int) -> np.ndarray:
    """``[vocab_size]`` booleans: True for the ids whose decoded text contains a stop string."""
    table = np.zeros(vocab_size, bool)
    if not stop_strings:
        return table
    ids = list(range(min(vocab_size, len(tokenizer))))
    texts = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    for i, text in zip(ids, texts):
        table[i] = any(s in text for s in stop_strings)
    return table


def _stop_tokens(tokenizer, vocab_size: int, sampling: SamplingParams) -> np.ndarray:
    """The :class:`Decoder`'s stop table: the ids holding a stop string, and EOS with ``stop_at_eos``."""
    table = stop_token_table(tokenizer, sampling.stop_strings, vocab_size)
    eos = tokenizer.eos_token_id
    if sampling.stop_at_eos and eos is not None and eos < len(table):
        table[eos] = True
    return table


def _cut_at_stop(
    decode: Callable[[Sequence[int]], str], ids: np.ndarray, stop_strings: Sequence[str]
) -> tuple[str, int, bool]:
    """(text before the first stop string, tokens up to the one completing it, whether found),
    with ``decode`` turning ids into text."""
    text = decode(ids)
    hits = [text.find(s) for s in stop_strings if s in text]
    if not hits:
        return text, len(ids), False
    first = min(hits)

    def completes(j: int) -> bool:  # the first j tokens hold a whole stop string at `first`
        prefix = decode(ids[:j])
        return any(prefix.find(s) == first for s in stop_strings)

    if len(ids) == 1 or not completes(len(ids) - 1):  # the usual case: the last token stops
        return text[:first], len(ids), True
    cut = next(j for j in range(1, len(ids)) if completes(j))
    return text[:first], cut, True


def _finish(tokenizer: Any, pad_id: int, out: SampledTokens, sampling: SamplingParams, prompt: Tokens) -> Generation:
    """Host side of a generation: texts cut before the stop string (special tokens left out), rows
    truncated where it ends, finish reasons."""
    tokens, lengths = np.array(out.tokens), np.array(out.lengths)
    logprobs, sample_lp = np.array(out.logprobs), np.array(out.sample_logprobs)

    def decode(ids: Sequence[int]) -> str:  # special tokens left out
        return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    eos = tokenizer.eos_token_id
    texts, reasons = [], []
    for i in range(len(tokens)):
        n = int(lengths[i])
        text, cut, found = _cut_at_stop(decode, tokens[i, :n], sampling.stop_strings)
        if cut < n:  # a stop string that straddled tokens: drop what the device sampled after it
            tokens[i, cut:], logprobs[i, cut:], sample_lp[i, cut:] = pad_id, 0.0, 0.0
            lengths[i] = n = cut
        ends_at_eos = sampling.stop_at_eos and n and int(tokens[i, n - 1]) == eos
        texts.append(text)
        reasons.append("stop" if found else "eos" if ends_at_eos else "length")
    return Generation(texts, tokens, lengths, logprobs, sample_lp, reasons, prompt)


def _from_decoder(name: str) -> property:
    """A read-only attribute of the sampler that lives on its :class:`Decoder`."""
    return property(lambda self: getattr(self.decoder, name), doc=f"The decoder's ``{name}`` (:class:`Decoder`).")


class Sampler:
    """Generates actions from a causal-LM policy; compiled once per (bucket, sampling setting).

    Args:
      model: the policy; its graph (architecture) is fixed here, its parameters can be passed
        per call (``model_state``) so a training loop samples from its latest weights.
      tokenizer: the policy's tokenizer (left padding and truncation, see
        :func:`archer_jax.models.load_tokenizer`).
      mesh: shard batches and the cache over this mesh (default: one device).
      rules: logical-axis rules for the parameters (:data:`archer_jax.runtime.sharding.DEFAULT_RULES`).
      max_prompt_length: prompts are truncated from the left to this many tokens (default: the
        model's ``n_positions`` minus ``max_new_tokens``).
      min_prompt_bucket: the shortest prompt length bucket (default ``decoding.MIN_PROMPT_BUCKET``, 64).
      matmul_precision: the programs' matmul precision (:mod:`archer_jax.runtime.precision`; None: ambient).

    The device work is ``self.decoder``'s (:class:`Decoder`): the attributes below read through to it.
    """

    def __init__(
        self,
        model: nnx.Module,
        tokenizer: Any,
        *,
        mesh: Mesh | None = None,
        rules: shd.Rules = shd.DEFAULT_RULES,
        max_prompt_length: int | None = None,
        min_prompt_bucket: int | None = None,
        matmul_precision: str | None = None,
    ):
        self.tokenizer = tokenizer
        self.decoder = Decoder(
            model,
            functools.partial(_stop_tokens, tokenizer, model.config.vocab_size),
            pad_id=int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
            mesh=mesh,
            rules=rules,
            max_prompt_length=max_prompt_length,
            min_prompt_bucket=min_prompt_bucket,
            matmul_precision=matmul_precision,
        )

    graphdef = _from_decoder("graphdef")
    config = _from_decoder("config")
    dtype = _from_decoder("dtype")
    mesh = _from_decoder("mesh")
    rules = _from_decoder("rules")
    max_prompt_length = _from_decoder("max_prompt_length")
    min_prompt_bucket = _from_decoder("min_prompt_bucket")
    pad_id = _from_decoder("pad_id")
    param_shardings = _from_decoder("param_shardings")
    model_state = _from_decoder("model_state")
    traces = _from_decoder("traces")  # how many times a program was traced (each trace compiles once)
    batch_bucket = _from_decoder("batch_bucket")
    matmul_precision = _from_decoder("matmul_precision")
    generate_tokens = _from_decoder("generate_tokens")  # token ids in, device arrays of the padded batch out

    def prompt_limit(self, sampling: SamplingParams) -> int:
        """The longest prompt (in tokens) that fits with ``max_new_tokens`` in the positions."""
        return self.decoder.prompt_limit(sampling)

    def encode(self, prompts: Sequence[str], sampling: SamplingParams) -> Tokens:
        """Tokenizes ``prompts`` (left truncation, left padding to a length bucket)."""
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, got one string")
        if len(prompts) == 0:
            raise ValueError("prompts is empty: nothing to generate from")
        limit = self.prompt_limit(sampling)
        encoded = encode(self.tokenizer, prompts, max_length=limit, min_bucket=min(self.min_prompt_bucket, limit))
        empty = np.flatnonzero(encoded.attention_mask.sum(1) == 0)
        if empty.size:
            raise ValueError(f"prompt {int(empty[0])} encodes to no tokens; every prompt needs at least one")
        return encoded

    def generate(
        self,
        prompts: Sequence[str],
        key: Array,
        sampling: SamplingParams = SamplingParams(),
        *,
        model_state: nnx.State | None = None,
        samples: int = 1,
        row_ids: Sequence[int] | None = None,
    ) -> Generation:
        """Generates ``samples`` actions per prompt (prompt-major rows; the prompt is run once).
        ``model_state`` defaults to the model's parameters; prompt ``i`` samples with the key folded
        with ``row_ids[i]`` (default ``i``)."""
        return self._generate(self.encode(prompts, sampling), key, sampling, model_state, samples, row_ids)

    def generate_rows(
        self,
        rows: Sequence[np.ndarray],
        key: Array,
        sampling: SamplingParams = SamplingParams(),
        *,
        model_state: nnx.State | None = None,
        samples: int = 1,
        row_ids: Sequence[int] | None = None,
    ) -> Generation:
        """Like :meth:`generate` from prompts already in token ids (one unpadded row each, e.g.
        kept in a replay buffer): no re-tokenization."""
        if len(rows) == 0:
            raise ValueError("rows is empty: nothing to generate from")
        return self._generate(self.encode_rows(rows, sampling), key, sampling, model_state, samples, row_ids)

    def encode_rows(self, rows: Sequence[np.ndarray], sampling: SamplingParams) -> Tokens:
        """Prompts in token ids (one unpadded row each) as :meth:`generate_rows` feeds them: each
        cut to its last ``prompt_limit`` tokens, left-padded to the longest one's bucket."""
        limit = self.prompt_limit(sampling)
        rows = [np.asarray(r, np.int32)[-limit:] for r in rows]
        return pad_rows(rows, self.pad_id, left=True, max_length=limit, min_bucket=min(self.min_prompt_bucket, limit))

    def _generate(
        self, encoded: Tokens, key: Array, sampling: SamplingParams, model_state: nnx.State | None, samples: int = 1,
        row_ids: Sequence[int] | None = None,
    ) -> Generation:
        out = self.generate_tokens(
            encoded.input_ids, encoded.attention_mask, key, sampling, model_state=model_state, samples=samples,
            row_ids=row_ids,
        )
        return self.fetch(out, sampling, encoded, samples)

    def fetch(self, out: SampledTokens, sampling: SamplingParams, prompt: Tokens, samples: int = 1) -> Generation:
        """The :class:`Generation` of :meth:`generate_tokens`' device arrays for ``prompt``: brought
        to the host, the padding rows cut off, the texts cut at their stop strings."""
        rows = prompt.input_ids.shape[0] * samples
        # Cut the padding rows off on the host: a slice of a device array compiles a program per shape.
        out = jax.tree.map(lambda a: np.asarray(a)[:rows], jax.device_get(out))
        return _finish(self.tokenizer, self.pad_id, out, sampling, prompt)
