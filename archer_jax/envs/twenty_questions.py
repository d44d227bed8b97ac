"""Twenty Questions (the official 157 objects in 17 categories) and its 10-object subset.

Rules (docs/algorithms.md, section 12): the observation starts as ``"Questions:\\n"`` and each turn appends
``"<question> <answer>\\n"``. Reward is -1 per turn and 0 on the winning turn; the agent wins
when the answer is yes and its question ends with one of the object's names (trailing
punctuation cut; names may be several words, e.g. "soccer ball"). After 20 turns without a win
the game is over (``info.at_limit``, a terminal state: the dialogue shows every turn).

The embedded oracle answers from ``data/twenty_questions.csv`` (one row per object: official
``;``-separated names, category, yes/no attributes) with the grammar below; anything else is
``"Invalid Question."``:

* an attribute: the attribute's canonical question or one of its paraphrases
  (``data/twenty_questions_attributes.csv``), e.g. "is it alive", "is it a living thing";
* a direct guess: ``is it (a|an|the) <name>`` -> yes for the object's names and synonyms;
* a category: ``is it (a|an) <category phrase>`` (:data:`CATEGORY_PHRASES`, e.g. "animal",
  "piece of furniture", "musical instrument"), unless an attribute claims the phrasing.

Before matching, the question is normalized: case, punctuation, accents and emoji dropped;
"is the object / this / your object ..." read as "is it ...", "is it a kind of X" as
"is it a X". A question that names two different objects is invalid.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
from collections.abc import Callable
from pathlib import Path

from archer_jax.envs.oracle import INVALID, NO, YES, NameIndex, Oracle, canonical_question, ends_with_name, normalize
from archer_jax.envs.question_game import MAX_TURNS, Attribute, QuestionGame, pick_oracle, read_attributes, read_csv

DATA = Path(__file__).parent / "data"
OBJECTS_CSV = DATA / "twenty_questions.csv"
ATTRIBUTES_CSV = DATA / "twenty_questions_attributes.csv"

SUBSET = ("Football", "Dog", "Banana", "Truck", "Pants", "Computer", "Piano", "Chair", "Pen", "Scissors")

CATEGORY_PHRASES: dict[str, tuple[str, ...]] = {
    "Sports": ("sports equipment", "sport equipment", "sports item", "piece of sports equipment", "sports gear"),
    "Animals": ("animal", "creature"),
    "Fruits": ("fruit",),
    "Vehicles": ("vehicle", "means of transport", "mode of transportation"),
    "Clothes": ("clothing", "item of clothing", "article of clothing", "clothes"),
    "Electronics": ("electronic device", "electronic item", "electronics", "electronic gadget", "appliance"),
    "Musical Instruments": ("musical instrument", "instrument"),
    "Furniture": ("furniture", "furniture item"),
    "Office Supplies": ("office supply", "office supplies", "office item", "stationery"),
    "Vegetables": ("vegetable", "veggie"),
    "Art": ("art supply", "art supplies", "art item", "art"),
    "Kitchen Tools": ("kitchen tool", "kitchen utensil", "utensil", "kitchenware"),
    "Nature": ("natural feature", "part of nature", "nature", "natural thing"),
    "Toys": ("toy", "plaything"),
    "Jewelry": ("jewelry", "jewellery", "piece of jewelry", "piece of jewellery", "accessory"),
    "Garden Supplies": ("garden supply", "garden tool", "gardening tool", "gardening supply", "garden item"),
    "Tools": ("tool", "hand tool", "power tool"),
}


@dataclasses.dataclass(frozen=True)
class TwentyQuestionsObject:
    names: tuple[str, ...]  # official spelling; the first is the primary name
    category: str
    facts: dict[str, bool]

    @property
    def name(self) -> str:
        return self.names[0]


@functools.cache
def objects() -> tuple[TwentyQuestionsObject, ...]:
    """The 157 official objects with their attributes, in the official order."""
    out = []
    for row in read_csv(OBJECTS_CSV):
        names = tuple(n.strip() for n in row.pop("names").split(";") if n.strip())
        category = row.pop("category")
        out.append(TwentyQuestionsObject(names, category, {k: v.strip() == "1" for k, v in row.items()}))
    return tuple(out)


@functools.cache
def attributes() -> tuple[Attribute, ...]:
    return read_attributes(ATTRIBUTES_CSV)


@functools.cache
def _by_name() -> dict[str, TwentyQuestionsObject]:
    return {normalize(n): obj for obj in objects() for n in obj.names}


@functools.lru_cache(maxsize=4096)
def object_named(name: str) -> TwentyQuestionsObject:
    """The object one of whose names is ``name`` (any case or punctuation)."""
    try:
        return _by_name()[normalize(name)]
    except KeyError:
        raise KeyError(f"no Twenty Questions object named {name!r}") from None


def _article_free(phrase: str) -> str:
    return re.sub(r"^(a|an|the|some) ", "", phrase)


class KnowledgeBaseOracle:
    """Answers Twenty Questions from the knowledge base with the grammar in the module docstring."""

    def __init__(self):
        self._names = NameIndex((n, obj.name) for obj in objects() for n in obj.names)
        self._categories = {normalize(p): c for c, phrases in CATEGORY_PHRASES.items() for p in phrases}
        self._attributes: dict[str, str] = {}
        for attr in attributes():
            for phrase in (attr.question, *attr.paraphrases):
                self._attributes[canonical_question(phrase)] = attr.name

    @functools.lru_cache(maxsize=65536)  # noqa: B019 (oracles live as long as the process)
    def parse(self, question: str) -> tuple[str, str] | None:
        """``("guess", name)``, ``("category", category)``, ``("attribute", name)`` or None."""
        q = canonical_question(question)
        if not q or len(q) > 500:
            return None
        if q in self._attributes:  # attributes first: their definitions are the most precise
            return ("attribute", self._attributes[q])
        named = self._names.find(q)
        if len(named) > 1:
            return None
        for lead in ("is it ", "is the answer ", "is the word ", "are they ", "it is ", "is it the "):
            if q.startswith(lead):
                rest = _article_free(q[len(lead) :])
                if named and rest in self._names.names_of(named):
                    return ("guess", next(iter(named)))
                if rest in self._categories:
                    return ("category", self._categories[rest])
        return None

    def answer(self, secret: str, question: str) -> str:
        parsed = self.parse(question)
        if parsed is None:
            return INVALID
        kind, value = parsed
        obj = object_named(secret)
        if kind == "guess":
            return YES if value == obj.name else NO
        if kind == "category":
            return YES if obj.category == value else NO
        return YES if obj.facts[value] else NO


class TwentyQuestions(QuestionGame):
    """One game of Twenty Questions. ``words``: the candidate objects (default: all 157).
    ``oracle``: an :class:`Oracle`, a zero-argument factory of one (a model oracle's:
    :func:`archer_jax.model_oracle.factory`), or ``"embedded"`` (default)."""

    secret_key = "word"
    game = "twenty_questions"

    def __init__(self, words: tuple[str, ...] | None = None, oracle: Oracle | Callable[[], Oracle] | str | None = None,
                 max_turns: int = MAX_TURNS):
        super().__init__(pick_oracle(oracle, self.game, KnowledgeBaseOracle), max_turns)
        self.objects = objects() if words is None else tuple(object_named(w) for w in words)

    def reset(self, seed: int | None = None, *, word: str | None = None) -> str:
        """A new game; ``word`` fixes the hidden object, else ``seed`` picks it."""
        return self.start(object_named(word) if word is not None else random.Random(seed).choice(self.objects))

    def wins(self, question: str, answer: str) -> bool:
        return answer == YES and ends_with_name(question, self.secret.names)


class TwentyQuestionsSubset(TwentyQuestions):
    """The 10-object subset the paper uses with the 7B actor."""

    game = "twenty_questions_subset"

    def __init__(self, oracle: Oracle | Callable[[], Oracle] | str | None = None, max_turns: int = MAX_TURNS):
        super().__init__(SUBSET, oracle, max_turns)
