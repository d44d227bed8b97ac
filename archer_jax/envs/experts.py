"""Scripted experts that play the knowledge-base games for the SFT warm start.

The optimal expert keeps the objects consistent with the dialogue so far and asks the question
that splits them most evenly (categories and attributes of the knowledge base), guessing when
two or fewer remain. The weaker ones are the same player with faults switched on — questions
in random order, redundant questions, early wrong guesses — so that a mixture of them leaves
room for RL to improve.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from archer_jax.envs import guess_my_city as gmc
from archer_jax.envs import twenty_questions as tq
from archer_jax.envs.oracle import INVALID, NO, YES


def parse_dialogue(observation: str) -> list[tuple[str, str]]:
    """``[(question, answer), ...]`` from a Twenty Questions observation."""
    turns = []
    for line in observation.split("\n")[1:]:
        for answer in (INVALID, YES, NO):
            if line.endswith(" " + answer):
                turns.append((line[: -len(answer) - 1], answer))
                break
    return turns


RANDOM_GUESS_PROB = 0.1  # the random expert's chance per turn of guessing instead of asking

_UNCOUNTABLE = ("furniture", "jewelry", "jewellery", "clothing", "art", "nature", "sports equipment", "electronics", "stationery")


def with_article(phrase: str) -> str:
    """``phrase`` with "a"/"an", except plurals and uncountables ("scissors", "furniture")."""
    if phrase in _UNCOUNTABLE or (phrase.endswith("s") and not phrase.endswith("ss")):
        return phrase
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


@dataclasses.dataclass
class ScriptedExpert:
    """A scripted player over any knowledge-base game. All faults off = the optimal expert:
    keep the secrets consistent with the dialogue, ask the question that splits them most evenly,
    guess when two or fewer remain.

    Args:
      secrets: the candidate secrets (primary names).
      questions: the questions it may ask.
      answer: ``answer(secret, question) -> "Yes." | "No." | "Invalid Question."`` (the oracle).
      guess: ``guess(secret) -> question`` naming the secret.
      random_order: ask a random informative question instead of the most balanced one.
      redundant_prob: chance per turn of asking a question whose answer is already implied.
      early_guess_prob: chance per turn of guessing a random remaining secret while several remain.
      seed: for the faults' randomness.
      random_questions: ask a random question of ``questions`` each turn (informative or not),
        or with probability :data:`RANDOM_GUESS_PROB` guess a random remaining secret.
    """

    secrets: tuple[str, ...]
    questions: tuple[str, ...]
    answer: Callable[[str, str], str]
    guess: Callable[[str], str]
    random_order: bool = False
    redundant_prob: float = 0.0
    early_guess_prob: float = 0.0
    seed: int = 0
    random_questions: bool = False  # after seed: positional calls keep their meaning

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self._yes: dict[str, frozenset[str]] = {}

    def yes_set(self, question: str) -> frozenset[str]:
        """The secrets for which the oracle answers yes (memoized per question)."""
        if question not in self._yes:
            self._yes[question] = frozenset(s for s in self.secrets if self.answer(s, question) == YES)
        return self._yes[question]

    def consistent(self, observation: str) -> list[str]:
        """The secrets whose answers agree with every answered question so far."""
        return self._consistent(parse_dialogue(observation))

    def _consistent(self, turns: list[tuple[str, str]]) -> list[str]:
        alive = list(self.secrets)
        for question, answer in turns:
            if answer != INVALID:
                yes = self.yes_set(question)
                alive = [s for s in alive if (s in yes) == (answer == YES)]
        return alive

    def act(self, observation: str) -> str:
        """The next question for the dialogue in ``observation``."""
        turns = parse_dialogue(observation)
        alive = self._consistent(turns) or list(self.secrets)
        asked = {q for q, _ in turns}
        if self.random_questions:
            if self.rng.random() < RANDOM_GUESS_PROB:
                return self.guess(self.rng.choice(alive))
            return self.rng.choice(self.questions)
        if len(alive) <= 2:
            return self.guess(alive[0])
        if self.early_guess_prob and self.rng.random() < self.early_guess_prob:
            return self.guess(self.rng.choice(alive))
        splits = []
        for q in self.questions:
            yes = len(self.yes_set(q).intersection(alive))
            splits.append((abs(2 * yes - len(alive)), q, 0 < yes < len(alive)))
        if self.redundant_prob and self.rng.random() < self.redundant_prob:
            redundant = [q for _, q, informative in splits if not informative] or sorted(asked)
            if redundant:
                return self.rng.choice(redundant)
        informative = [(s, q) for s, q, ok in splits if ok and q not in asked]
        if not informative:
            return self.guess(self.rng.choice(alive))
        if self.random_order:
            return self.rng.choice(informative)[1]
        return min(informative)[1]


EXPERTS = {
    "optimal": dict(),
    "random_order": dict(random_order=True),
    "redundant": dict(random_order=True, redundant_prob=0.3),
    "early_guesser": dict(random_order=True, early_guess_prob=0.25),
    "random": dict(random_questions=True),
}


def _faults(kind: str) -> dict:
    if kind not in EXPERTS:
        raise KeyError(f"unknown expert {kind!r}; known: {', '.join(EXPERTS)}")
    return EXPERTS[kind]


def expert(kind: str, seed: int = 0, universe: tuple[str, ...] | None = None) -> ScriptedExpert:
    """A Twenty Questions expert of :data:`EXPERTS` ``kind`` over ``universe`` (default: all objects)."""
    oracle = tq.KnowledgeBaseOracle()
    objs = tq.objects() if universe is None else tuple(tq.object_named(n) for n in universe)
    questions = [f"Is it {with_article(phrases[0])}?" for phrases in tq.CATEGORY_PHRASES.values()]
    questions += [a.question for a in tq.attributes()]
    return ScriptedExpert(
        secrets=tuple(o.name for o in objs),
        questions=tuple(questions),
        answer=oracle.answer,
        guess=lambda name: f"Is it {with_article(name.lower())}?",
        seed=seed,
        **_faults(kind),
    )


def city_expert(kind: str, seed: int = 0) -> ScriptedExpert:
    """A Guess My City expert of :data:`EXPERTS` ``kind``: yes/no attributes, every category
    value ("Is it in Asia?", "Is it in Brazil?"), population thresholds, then a guess."""
    oracle = gmc.CityOracle()
    questions = []
    for attr in gmc.attributes():
        if attr.kind == "bool":
            questions.append(attr.question)
        elif attr.kind == "category":
            values = sorted({v.strip() for c in gmc.cities() for v in c.facts[attr.name].split(";") if v.strip()})
            questions += [attr.question.replace("{value}", v) for v in values]
        else:
            questions += [attr.question.replace("{value}", str(n)) for n in (1, 2, 3, 5, 8, 10, 15, 20)]
    # Questions that would name a city (a province called after its capital) are guesses, not splits.
    questions = [q for q in questions if not oracle.named_cities(q)]
    return ScriptedExpert(
        secrets=tuple(c.name for c in gmc.cities()),
        questions=tuple(questions),
        answer=oracle.answer,
        guess=lambda name: f"Is it {gmc.city_named(name).names[0]}?",
        seed=seed,
        **_faults(kind),
    )
