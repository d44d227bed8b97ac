"""What a model oracle is asked and how its text becomes the game's answer, and the ``oracle`` env
option's spec: ``"embedded"`` (the env's own oracle), ``"t5:PATH"`` or ``"lm:PATH"`` (a model,
loaded above the envs by :mod:`archer_jax.model_oracle`). Plain string handling: no model here.

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from archer_jax.envs.oracle import INVALID, NO, YES

EMBEDDED = "embedded"
KINDS = ("t5", "lm")
CANT_ANSWER = "I can't answer that question."


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
