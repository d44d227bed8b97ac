"""What Twenty Questions and Guess My City share: the dialogue, the turn limit, the tables.

The observation starts as ``"Questions:\\n"`` and each turn appends ``"<question> <answer>\\n"``
(the question kept on one line, at most 500 characters). Reward is -1 per turn and 0 on the
winning turn; after ``max_turns`` turns without a win the game is over (``info.at_limit``): the
observation shows every turn, so the limit is part of the game's state and its last transition is
terminal (as in the official code; ``limit_ends_game = False`` would make it a cut, ``info.truncated``).
Subclasses pick the secret and say what wins. A step before
``reset()`` or after the episode ended raises :class:`~archer_jax.envs.base.EnvError` (the
contract of :mod:`archer_jax.envs.base`).
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from archer_jax.envs.base import StepInfo, StepResult, episode_over, not_started
from archer_jax.envs.oracle import INVALID, MAX_QUESTION_CHARS, Oracle
from archer_jax.envs.oracle_formats import EMBEDDED

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


def pick_oracle(oracle: Oracle | Callable[[], Oracle] | str | None, game: str, embedded: Callable[[], Oracle]) -> Oracle:
    """The game's oracle: ``embedded()`` for None or ``"embedded"``, the given instance, or what a
    zero-argument factory returns (a model oracle's: :func:`archer_jax.model_oracle.factory`; the
    envs load no model, so a ``"t5:PATH"`` / ``"lm:PATH"`` spec is refused)."""
    if oracle is None or oracle == EMBEDDED:
        return embedded()
    if isinstance(oracle, str):
        raise ValueError(f"{game}: oracle {oracle!r} is a model oracle's spec; pass the oracle or a zero-argument "
                         "factory of it (archer_jax.model_oracle.factory)")
    return oracle if isinstance(oracle, Oracle) else oracle()


class QuestionGame:
    """One game of questions about a hidden secret (anything with a ``name``)."""

    secret_key = "secret"  # the key of the secret's name in ``info.extra``
    limit_ends_game = True  # the turn limit is a rule of the game (visible in the dialogue), not a cut

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
        question = self.ask(action)
        return self.answered(question, self.oracle.answer(self.secret.name, question))

    @staticmethod
    def step_many(games: Sequence[QuestionGame], actions: Sequence[str]) -> list[StepResult]:
        """``[g.step(a) for g, a in zip(games, actions)]``, with one batched ``answer_batch`` call
        per oracle that has one (model oracles) instead of a call per game."""
        questions = [game.ask(action) for game, action in zip(games, actions)]
        answers: list[str | None] = [None] * len(games)
        by_oracle: dict[int, list[int]] = {}
        for i, game in enumerate(games):
            by_oracle.setdefault(id(game.oracle), []).append(i)
        for members in by_oracle.values():
            oracle = games[members[0]].oracle
            if hasattr(oracle, "answer_batch"):
                replies = oracle.answer_batch([(games[i].secret.name, questions[i]) for i in members])
            else:
                replies = [oracle.answer(games[i].secret.name, questions[i]) for i in members]
            for i, reply in zip(members, replies):
                answers[i] = reply
        return [game.answered(q, a) for game, q, a in zip(games, questions, answers)]

    def ask(self, action: str) -> str:
        """The question that ``action`` asks (one line, cut at 500 characters)."""
        if self.secret is None:
            raise not_started(type(self).__name__)
        if self.done:
            raise episode_over(type(self).__name__)
        return one_line(action)  # one line: it joins the dialogue

    def answered(self, question: str, answer: str) -> StepResult:
        """The step of ``question`` (from :meth:`ask`) once the oracle said ``answer``."""
        self.turn += 1
        won = self.wins(question, answer)
        at_limit = not won and self.turn >= self.max_turns
        self.done = won or at_limit
        self.history += f"{question} {answer}\n"
        info = StepInfo(
            success=won, truncated=at_limit and not self.limit_ends_game, invalid=answer == INVALID,
            at_limit=at_limit, extra={self.secret_key: self.secret.name},
        )
        return StepResult(self.history, 0.0 if won else -1.0, self.done, info)
