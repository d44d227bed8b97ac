"""Model oracles, the env option ``oracle``: the paper's fine-tuned flan-t5 (``t5:PATH``) and any
causal LM the project loads (``lm:PATH``), with the official prompts and answer mappings
(:mod:`archer_jax.envs.oracle_formats`).

    --config.env.options.oracle=t5:/data/20q_t5_oracle          # an HF directory
    --config.env.options.oracle=t5:/data/20q_t5_oracle.pt       # the official file (converted once)
    --config.env.options.oracle=lm:mistralai/Mistral-7B-Instruct-v0.2   # 20Q and its subset

The envs load no model: the question games take the oracle, or a picklable zero-argument factory
of it (:func:`factory`; :func:`from_config` for a run's config), from the code that builds them.

Every pending question of a step goes into one batched greedy decode (the env pool asks each
game for its question, then answers them together: :meth:`QuestionGame.step_many`). Prompts are
padded to power-of-two length and batch buckets, so a run compiles a handful of programs. One
oracle per (spec, game) is loaded per process and shared by its envs; model oracles therefore
need the envs in this process (``env.workers=0``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np

from archer_jax import models
from archer_jax.envs.base import clean_text
from archer_jax.envs.oracle_formats import EMBEDDED, FORMATS, OracleFormat, parse
from archer_jax.models import official
from archer_jax.models.t5.generate import greedy
from archer_jax.models.tokenizer import next_power_of_two, pad_rows
from archer_jax.sampling.decoding import SamplingParams
from archer_jax.sampling.sampler import Sampler

log = logging.getLogger(__name__)

DEFAULT_T5_BASE = "google/flan-t5-small"  # the official oracles' architecture and tokenizer


class ModelOracle:
    """Answers ``(secret, question)`` pairs with a model: ``answer`` one, ``answer_batch`` many
    in one decode. ``generate(prompts, max_new_tokens)`` returns the greedy texts."""

    def __init__(self, generate: Callable[[list[str], int], list[str]], fmt: OracleFormat, name: str):
        self.generate = generate
        self.format = fmt
        self.name = name
        self.calls = 0  # batched decodes
        self.questions = 0  # questions answered

    def answer(self, secret: str, question: str) -> str:
        return self.answer_batch([(secret, question)])[0]

    def answer_batch(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """The answers to ``pairs``, in order, from one batched greedy decode."""
        if not pairs:
            return []
        decoded = self.generate([self.format.prompt(s, q) for s, q in pairs], self.format.max_new_tokens)
        self.calls += 1
        self.questions += len(pairs)
        # One clean line each: the answer joins the dialogue after the question.
        return [" ".join(clean_text(self.format.answer(s, d)).split()) for (s, _), d in zip(pairs, decoded)]


class T5Generator:
    """Greedy texts of a T5 model for a batch of prompts (right padding, power-of-two buckets)."""

    def __init__(self, model, tokenizer, min_bucket: int = 16, min_batch: int = 8):
        self.model = model
        self.tokenizer = tokenizer
        self.min_bucket = min_bucket
        self.min_batch = min_batch  # fewer batch buckets, fewer programs to compile

    def __call__(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        rows = self.tokenizer(prompts, add_special_tokens=True)["input_ids"]
        count, pad = len(rows), self.tokenizer.pad_token_id
        rows = rows + [[pad]] * (max(self.min_batch, next_power_of_two(count)) - count)  # filler: one pad token, never read
        length = max(self.min_bucket, next_power_of_two(max(len(r) for r in rows)))
        ids, mask = pad_rows(rows, pad, left=False, max_length=length, length=length)
        tokens = np.asarray(greedy(self.model, ids, mask, max_new_tokens))[:count]
        return self.tokenizer.batch_decode(tokens, skip_special_tokens=True)


class CausalLMGenerator:
    """Greedy texts of a causal LM (the project's sampler: KV cache, buckets), new tokens only."""

    def __init__(self, model, tokenizer):
        self.sampler = Sampler(model, tokenizer)
        bos = tokenizer.bos_token
        self.prefix = bos if bos and not tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id] else ""

    def __call__(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        sampling = SamplingParams(max_new_tokens=max_new_tokens, greedy=True, stop_strings=())
        return self.sampler.generate([self.prefix + p for p in prompts], jax.random.key(0), sampling).texts


def converted_directory(path: Path, base: str) -> Path:
    """An HF directory for the official ``.pt`` oracle at ``path`` (written once, in the user's
    cache, keyed by the file's path, size and time), with ``base``'s tokenizer."""
    stat = path.stat()
    key = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{base}".encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "archer_jax" / "oracles"
    directory = cache / f"{path.stem}-{key}"
    if not (directory / "config.json").is_file():
        official.convert_t5_oracle(path, directory, base=base)
        log.info("converted the official oracle %s to %s", path, directory)
    return directory


def load(spec: str, game: str, base: str = DEFAULT_T5_BASE) -> ModelOracle:
    """The model oracle of ``spec`` for ``game`` (not cached: see :func:`shared`)."""
    kind, path = parse(spec, game)
    if kind == EMBEDDED:
        raise ValueError("the embedded oracle is the env's own, not a model")
    if kind == "t5":
        file = Path(path).expanduser()
        directory = converted_directory(file, base) if file.is_file() else path
        generate = T5Generator(models.load_t5(directory), models.load_tokenizer(directory, padding_side="right"))
    else:
        generate = CausalLMGenerator(models.load_causal_lm(path), models.load_tokenizer(path))
    return ModelOracle(generate, FORMATS[(kind, game)], spec)


@functools.lru_cache(maxsize=None)
def shared(spec: str, game: str, base: str = DEFAULT_T5_BASE) -> ModelOracle:
    """One model oracle per (spec, game, base) in this process, shared by its envs."""
    return load(spec, game, base)


def factory(spec: str, game: str) -> Callable[[], ModelOracle]:
    """The picklable zero-argument factory of ``spec``'s model oracle for ``game`` (:func:`shared`
    in the process that calls it), what a question game takes as its ``oracle``. A bad spec
    raises a ValueError here."""
    parse(spec, game)
    return functools.partial(shared, spec, game)


def from_config(env) -> Callable[[], ModelOracle] | None:
    """The :func:`factory` of the model oracle ``env.options.oracle`` names for ``env.name`` (``env``:
    the run's ``config.env`` group), or None: the env's embedded oracle, or an env without model oracles."""
    spec = env.options.get("oracle", EMBEDDED)
    if spec == EMBEDDED or env.name not in {game for _, game in FORMATS}:
        return None
    return factory(spec, env.name)
