"""What Twenty Questions and Guess My City share: the dialogue, the turn limit, the tables.

The observation starts as ``"Questions:\\n"`` and each turn appends ``"<question> <answer>\\n"``
(the question kept on one line, at most 500 characters). Reward is -1 per turn and 0 on the
winning turn; after ``max_turns`` turns without a win the episode is cut (``info.truncated``),
which is not a terminal state. Subclasses pick the secret and say what wins. A step before
``reset()`` or after the episode ended raises :class:`~archer_jax.envs.base.EnvError` (the
contract of :mod:`archer_jax.envs.base`).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

from archer_jax.envs.base import StepInfo, StepResult, episode_over, not_started
from archer_jax.envs.oracle import INVALID, MAX_QUESTION_CHARS, Oracle

START = "Questions:\n"
MAX_TURNS = 20


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a knowledge-base table, as dicts keyed by the header."""
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@dataclasses.dataclass(frozen=True)
class Attribute:
    """One column of a knowledge base and how players ask about it."""

    name: str
    question: str  # the canonical question; category and number kinds hold "{value}"
    paraphrases: tuple[str, ...]
    definition: str  # how borderline cases are decided
    kind: str = "bool"  # bool, category or number


def read_attributes(path: Path) -> tuple[Attribute, ...]:
    """The attribute table at ``path`` (``attribute,[kind,]question,paraphrases,definition``;
    paraphrases ``|``-separated)."""
    return tuple(
        Attribute(
            r["attribute"],
            r["question"],
            tuple(p for p in r["paraphrases"].split("|") if p),
            r["definition"],
            r.get("kind", "bool"),
        )
        for r in read_csv(path)
    )


def one_line(question: str) -> str:
    """``question`` as the dialogue records it: whitespace runs (newlines included) become one space,
    cut at ``MAX_QUESTION_CHARS`` characters (offline datasets clean their questions the same way)."""
    return " ".join(str(question).split())[:MAX_QUESTION_CHARS]


class QuestionGame:
    """One game of questions about a hidden secret (anything with a ``name``)."""

    secret_key = "secret"  # the key of the secret's name in ``info.extra``

    def __init__(self, oracle: Oracle, max_turns: int = MAX_TURNS):
        self.oracle = oracle
        self.max_turns = max_turns
        self.secret: Any = None
        self.history, self.turn, self.done = START, 0, True

    def wins(self, question: str, answer: str) -> bool:
        """Whether ``question``, answered ``answer``, finds the secret."""
        raise NotImplementedError

    def start(self, secret: Any) -> str:
        """Begins a game about ``secret``; returns the first observation."""
        self.secret = secret
        self.history, self.turn, self.done = START, 0, False
        return self.history

    def step(self, action: str) -> StepResult:
        """Asks ``action`` (any string: kept on one line, cut at 500 characters)."""
        if self.secret is None:
            raise not_started(type(self).__name__)
        if self.done:
            raise episode_over(type(self).__name__)
        question = one_line(action)  # one line: it joins the dialogue
        answer = self.oracle.answer(self.secret.name, question)
        self.turn += 1
        won = self.wins(question, answer)
        truncated = not won and self.turn >= self.max_turns
        self.done = won or truncated
        self.history += f"{question} {answer}\n"
        info = StepInfo(
            success=won, truncated=truncated, invalid=answer == INVALID, extra={self.secret_key: self.secret.name}
        )
        return StepResult(self.history, 0.0 if won else -1.0, self.done, info)
