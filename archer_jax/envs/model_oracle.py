"""Model oracles, the env option ``oracle``: the paper's fine-tuned flan-t5 (``t5:PATH``) and any
causal LM the project loads (``lm:PATH``), with the official prompts and answer mappings.

    --config.env.options.oracle=t5:/data/20q_t5_oracle          # an HF directory
    --config.env.options.oracle=t5:/data/20q_t5_oracle.pt       # the official file (converted once)
    --config.env.options.oracle=lm:mistralai/Mistral-7B-Instruct-v0.2   # 20Q and its subset

The official formats (read in the official ArCHer code, ``archer/environment``):

* Twenty Questions (and the subset), flan-t5: the prompt is ``"The object is {word}." + question``
  (the word lowercased, no space before the question), greedy, 16 new tokens, decoded without
  special tokens; an answer containing "yes" is ``Yes.``, else one containing "no" is ``No.``,
  else ``Invalid Question.`` (substring tests on the lowercased answer, in that order).
* Guess My City, flan-t5: ``"Your home town is {city}." + question`` (the official
  "City, Country" string as it is), greedy, 64 new tokens; the answer is kept as the model wrote
  it, except that an answer naming the city (its part before the comma) becomes
  ``I can't answer that question.``.
* The 20Q subset's LM oracle (the official Mistral server, never wired into the official envs):
  ``"[INST]The object is {word}." + question + "Yes or No[/INST]\\n"`` after one BOS, greedy,
  16 new tokens, only the new tokens decoded, then the yes/no mapping above.

Every pending question of a step goes into one batched greedy decode (the env pool asks each
game for its question, then answers them together: :meth:`QuestionGame.step_many`). Prompts are
padded to power-of-two length and batch buckets, so a run compiles a handful of programs. One
oracle per (spec, game) is loaded per process and shared by its envs; model oracles therefore
need the envs in this process (``env.workers=0``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from archer_jax.envs.base import clean_text
from archer_jax.envs.oracle import INVALID, NO, YES

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
KINDS = ("t5", "lm")
CANT_ANSWER = "I can't answer that question."
DEFAULT_T5_BASE = "google/flan-t5-small"  # the official oracles' architecture and tokenizer


def yes_no(decoded: str) -> str:
    """The official mapping of a decoded answer: "yes" in it, else "no" in it, else invalid."""
    text = decoded.strip().lower()
    return YES if "yes" in text else NO if "no" in text else INVALID


def city_reply(city: str, decoded: str) -> str:
    """Guess My City's answer: the model's text, unless it names the city."""
    return CANT_ANSWER if city.lower().split(",")[0] in decoded.lower() else decoded


@dataclasses.dataclass(frozen=True)
class OracleFormat:
    """How a game asks a model: the prompt of (secret, question), the env's answer from
    (secret, decoded text), and the new tokens per answer."""

    prompt: Callable[[str, str], str]
    answer: Callable[[str, str], str]
    max_new_tokens: int


_OBJECT_T5 = OracleFormat(lambda word, q: f"The object is {word.lower()}." + q, lambda _, d: yes_no(d), 16)
_OBJECT_LM = OracleFormat(lambda word, q: f"[INST]The object is {word.lower()}." + q + "Yes or No[/INST]\n",
                          lambda _, d: yes_no(d), 16)
_CITY_T5 = OracleFormat(lambda city, q: f"Your home town is {city}." + q, city_reply, 64)
FORMATS: dict[tuple[str, str], OracleFormat] = {
    ("t5", "twenty_questions"): _OBJECT_T5,
    ("t5", "twenty_questions_subset"): _OBJECT_T5,
    ("t5", "guess_my_city"): _CITY_T5,
    ("lm", "twenty_questions"): _OBJECT_LM,
    ("lm", "twenty_questions_subset"): _OBJECT_LM,
}


def parse(spec: str, game: str) -> tuple[str, str]:
    """``(kind, path)`` of an ``oracle`` option (``("embedded", "")`` for the default), or a
    ValueError naming what is wrong."""
    if spec == EMBEDDED:
        return EMBEDDED, ""
    kind, sep, path = str(spec).partition(":")
    if not sep or kind not in KINDS or not path:
        raise ValueError(f"{spec!r} is not 'embedded', 't5:PATH' or 'lm:PATH'")
    if (kind, game) not in FORMATS:
        games = sorted(g for k, g in FORMATS if k == kind)
        raise ValueError(f"a {kind} oracle has no official format for {game}; it answers {', '.join(games)}")
    return kind, path


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
        from archer_jax.models.t5.generate import greedy
        from archer_jax.models.tokenizer import next_power_of_two, pad_rows

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
        from archer_jax.sampling.sampler import Sampler

        self.sampler = Sampler(model, tokenizer)
        bos = tokenizer.bos_token
        self.prefix = bos if bos and not tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id] else ""

    def __call__(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        import jax

        from archer_jax.sampling.decoding import SamplingParams

        sampling = SamplingParams(max_new_tokens=max_new_tokens, greedy=True, stop_strings=())
        return self.sampler.generate([self.prefix + p for p in prompts], jax.random.key(0), sampling).texts


def converted_directory(path: Path, base: str) -> Path:
    """An HF directory for the official ``.pt`` oracle at ``path`` (written once, in the user's
    cache, keyed by the file's path, size and time), with ``base``'s tokenizer."""
    from archer_jax.models import official

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
    from archer_jax import models

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
