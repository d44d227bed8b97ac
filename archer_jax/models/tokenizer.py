"""Tokenizers through ``transformers.AutoTokenizer``, set up the way ArCHer uses them.

* Truncation keeps the end of a text (``truncation_side="left"``): a dialogue's latest turns
  matter most.
* GPT-2 has no pad token; as in Hugging Face, it pads with EOS.
* Causal LMs pad on the left (prompts end where generation starts); encoders on the right.
* :func:`encode` pads a batch to a length bucket so jitted functions see few shapes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from archer_jax.models import hub

_CAUSAL_MODEL_TYPES = ("gpt2", "mistral", "llama", "gemma", "qwen2")


def load_tokenizer(name_or_path: str | os.PathLike, *, padding_side: str | None = None):
    """Loads the tokenizer of a hub name or HF-format directory.

    ``padding_side`` defaults to ``left`` for causal LMs (per ``config.json``'s ``model_type``)
    and ``right`` otherwise. Raises :class:`hub.ModelLoadError` naming the path on failure.
    """
    import transformers

    if padding_side not in (None, "left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    directory = hub.resolve(name_or_path)
    if padding_side is None:
        model_type = hub.read_config(directory).get("model_type") if (directory / hub.CONFIG).is_file() else None
        padding_side = "left" if model_type in _CAUSAL_MODEL_TYPES else "right"
    if not hub.has_tokenizer_files(directory):
        raise hub.ModelLoadError(
            f"{directory} has no tokenizer files (tokenizer.json, or vocab.json + merges.txt, or a sentencepiece .model)"
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise hub.ModelLoadError(f"{directory}: cannot load a tokenizer: {reason}") from None
    tokenizer.truncation_side = "left"
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise hub.ModelLoadError(f"{directory}: the tokenizer has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def next_power_of_two(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 << max(n - 1, 0).bit_length()


def bucket_length(length: int, max_length: int, min_bucket: int = 16) -> int:
    """The smallest power-of-two bucket ``>= length`` (at least ``min_bucket``), capped at ``max_length``."""
    return min(max(min_bucket, next_power_of_two(length)), max_length)


class Tokens(NamedTuple):
    """A batch of token ids with its 0/1 attention mask, ``[batch, length]`` each (int32).

    The one token-batch type of archer_jax: what :func:`encode` and :func:`pad_rows` return, what
    the models, the sampler and the learner batches take. ``input_ids``/``attention_mask`` are the
    Hugging Face names of the same two arrays.
    """

    ids: np.ndarray  # [batch, length] int32
    mask: np.ndarray  # [batch, length] int32, 1 = real token

    @property
    def input_ids(self) -> np.ndarray:
        return self.ids

    @property
    def attention_mask(self) -> np.ndarray:
        return self.mask


def encode(
    tokenizer,
    texts: Sequence[str],
    *,
    max_length: int,
    length: int | None = None,
    min_bucket: int = 16,
    add_special_tokens: bool = True,
    padding_side: str | None = None,
) -> Tokens:
    """Tokenizes ``texts``, truncating each from the left to ``max_length`` tokens.

    The batch is padded (on ``padding_side``, by default the tokenizer's, with its pad token) to
    ``length``, or by default to :func:`bucket_length` of its longest row.
    """
    if padding_side not in (None, "left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    rows = token_rows(tokenizer, texts, max_length=max_length, add_special_tokens=add_special_tokens)
    return pad_rows(rows, tokenizer.pad_token_id, left=(padding_side or tokenizer.padding_side) == "left",
                    length=length, max_length=max_length, min_bucket=min_bucket)


def token_rows(tokenizer, texts: Sequence[str], *, max_length: int, add_special_tokens: bool = True) -> list[np.ndarray]:
    """Each text's token ids (int32, no padding), truncated from the left to ``max_length``."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got one string")
    rows = tokenizer(list(texts), truncation=True, max_length=max_length, add_special_tokens=add_special_tokens)
    return [np.asarray(r, np.int32) for r in rows["input_ids"]]


def pad_rows(
    rows: Sequence[Sequence[int]],
    pad_id: int,
    *,
    left: bool,
    max_length: int,
    length: int | None = None,
    min_bucket: int = 16,
) -> Tokens:
    """Token id rows (e.g. kept in a replay buffer) padded on the left or right with ``pad_id`` to
    ``length``, or by default to :func:`bucket_length` of the longest row."""
    longest = max((len(r) for r in rows), default=0)
    if length is None:
        length = bucket_length(longest, max_length, min_bucket)
    elif length < longest:
        raise ValueError(f"length {length} is shorter than the longest encoded text ({longest} tokens)")
    ids = np.full((len(rows), length), pad_id, np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        span = slice(length - len(row), length) if left else slice(0, len(row))
        ids[i, span] = row
        mask[i, span] = 1
    return Tokens(ids, mask)


def action_rows(tokenizer, actions: Sequence[str], *, stop_string: str = "\n", max_action_length: int = 64) -> list[np.ndarray]:
    """Each action + ``stop_string`` in policy token rows, tokenized on its own (no special
    tokens), as the sampler produces it after the observation. An action longer than
    ``max_action_length`` tokens keeps its beginning (what the sampler would have produced)."""
    texts = [a + stop_string for a in actions]
    rows = token_rows(tokenizer, texts, max_length=1 << 30, add_special_tokens=False)
    return [r[:max_action_length] for r in rows]
