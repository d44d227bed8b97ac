"""Guess My City: find a hidden city among the official 91 (``data/cities.csv``).

Rules (docs/algorithms.md, section 12) as in Twenty Questions — observation ``"Questions:\\n"`` plus one
``"<question> <answer>\\n"`` line per turn, reward -1 per turn and 0 on the winning turn, 20
turns and the game is over (a terminal state) — except the win: the city's name (or an alias, e.g. Mumbai / Bombay)
appears in the question, as whole words. The embedded oracle never says a city's name: it
answers ``Yes.``, ``No.`` or ``Invalid Question.``.

Grammar (after :func:`~archer_jax.envs.oracle.canonical_question` normalization):

* a question naming one city is a guess (yes iff it is the hidden one); naming two is invalid;
* a yes/no attribute: its question or a paraphrase (``data/cities_attributes.csv``), e.g.
  "is it a coastal city", "does it have a subway";
* a category attribute: a template with a value, e.g. "is it in {value}" where the value is a
  continent, region, country or province ("is it in Asia", "is your city in Brazil"), "is it
  in the {value}ern hemisphere", "is {value} the main language"; an unknown value is invalid;
* the population: "does it have more than {value} million people" (a number, digits or words).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
from collections.abc import Callable
from pathlib import Path

from archer_jax.envs.oracle import INVALID, NO, YES, NameIndex, Oracle, canonical_question, mentions, normalize
from archer_jax.envs.question_game import MAX_TURNS, Attribute, QuestionGame, pick_oracle, read_attributes, read_csv

DATA = Path(__file__).parent / "data"
CITIES_CSV = DATA / "cities.csv"
ATTRIBUTES_CSV = DATA / "cities_attributes.csv"

# Other ways of naming category values (normalized -> normalized value in the table).
VALUE_ALIASES = {
    "usa": "united states", "us": "united states", "america": "united states", "the us": "united states",
    "the usa": "united states", "united states of america": "united states", "uk": "united kingdom",
    "britain": "united kingdom", "great britain": "united kingdom", "england": "united kingdom",
    "drc": "democratic republic of the congo", "congo": "democratic republic of the congo",
    "korea": "south korea", "burma": "myanmar", "persia": "iran", "russian federation": "russia",
    "europe and asia": "europe", "the americas": "north america", "mandarin": "chinese",
}
_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NUMBERS.update(thirty=30, forty=40, fifty=50)


@dataclasses.dataclass(frozen=True)
class City:
    name: str  # the official string, e.g. "Bombay, India"
    names: tuple[str, ...]  # the city's own name first, then aliases (win on any of them)
    facts: dict[str, str]


@functools.cache
def cities() -> tuple[City, ...]:
    out = []
    for row in read_csv(CITIES_CSV):
        name, city, aliases = row.pop("name"), row.pop("city"), row.pop("aliases")
        names = (city, *(a for a in aliases.split(";") if a.strip()))
        out.append(City(name, tuple(dict.fromkeys(n.strip() for n in names)), row))
    return tuple(out)


@functools.cache
def attributes() -> tuple[Attribute, ...]:
    return read_attributes(ATTRIBUTES_CSV)


@functools.cache
def _by_name() -> dict[str, City]:
    return {normalize(c.name): c for c in cities()} | {normalize(n): c for c in cities() for n in c.names}


def city_named(name: str) -> City:
    try:
        return _by_name()[normalize(name)]
    except KeyError:
        raise KeyError(f"no Guess My City city named {name!r}") from None


def _values(city: City, attribute: str) -> set[str]:
    return {normalize(v) for v in city.facts[attribute].split(";") if v.strip()}


def _number(text: str) -> float | None:
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    return float(_NUMBERS[text]) if text in _NUMBERS else None


class CityOracle:
    """Answers Guess My City questions from the city table (grammar in the module docstring)."""

    def __init__(self):
        self._names = NameIndex((n, c.name) for c in cities() for n in c.names)
        self._bool: dict[str, str] = {}
        self._templates: list[tuple[re.Pattern, Attribute]] = []
        for attr in attributes():
            for phrase in (attr.question, *attr.paraphrases):
                if attr.kind == "bool":
                    self._bool[canonical_question(phrase)] = attr.name
                else:
                    pattern = re.escape(canonical_question(phrase.replace("{value}", "VALUEX"))).replace(
                        "valuex", r"(?P<value>[a-z0-9' .]+?)"
                    )
                    self._templates.append((re.compile(f"^{pattern}$"), attr))
        self._known = {a.name: set().union(*(_values(c, a.name) for c in cities())) for a in attributes() if a.kind == "category"}

    def named_cities(self, question: str) -> set[str]:
        """Official names of the cities ``question`` mentions."""
        return self._names.find(question)

    @functools.lru_cache(maxsize=65536)  # noqa: B019
    def parse(self, question: str) -> tuple[str, str, str] | None:
        """``("guess", city, "")``, ``("bool", attribute, "")``, ``("category", attribute, value)``,
        ``("number", attribute, value)`` or None (invalid)."""
        q = canonical_question(question)
        if not q or len(q) > 500:
            return None
        named = self.named_cities(q)
        if len(named) > 1:
            return None
        if named:
            return ("guess", named.pop(), "")
        if q in self._bool:
            return ("bool", self._bool[q], "")
        for pattern, attr in self._templates:
            match = pattern.match(q)
            if not match:
                continue
            value = re.sub(r"^the ", "", match.group("value").strip())
            if attr.kind == "number":
                number = _number(value)
                if number is not None:
                    return ("number", attr.name, str(number))
                continue
            value = VALUE_ALIASES.get(value, value)
            # "is it in {value}" is shared by continent, region, country and province: the
            # attribute is the first (in table order) whose values include this one.
            for candidate in attributes():
                if candidate.kind == "category" and value in self._known[candidate.name] and any(
                    p.match(q) for p, a in self._templates if a.name == candidate.name
                ):
                    return ("category", candidate.name, value)
        return None

    def answer(self, secret: str, question: str) -> str:
        parsed = self.parse(question)
        if parsed is None:
            return INVALID
        kind, attribute, value = parsed
        city = city_named(secret)
        if kind == "guess":
            return YES if attribute == city.name else NO
        if kind == "bool":
            return YES if city.facts[attribute].strip() == "1" else NO
        if kind == "category":
            return YES if value in _values(city, attribute) else NO
        return YES if float(city.facts[attribute]) > float(value) else NO


class GuessMyCity(QuestionGame):
    """One game of Guess My City over the official cities. ``oracle``: an :class:`Oracle`, a
    zero-argument factory of one (a model oracle's: :func:`archer_jax.model_oracle.factory`), or
    ``"embedded"`` (default)."""

    secret_key = "city"
    game = "guess_my_city"

    def __init__(self, oracle: Oracle | Callable[[], Oracle] | str | None = None, max_turns: int = MAX_TURNS):
        super().__init__(pick_oracle(oracle, self.game, CityOracle), max_turns)
        self.cities = cities()

    def reset(self, seed: int | None = None, *, city: str | None = None) -> str:
        return self.start(city_named(city) if city is not None else random.Random(seed).choice(self.cities))

    def wins(self, question: str, answer: str) -> bool:
        """The city's name or an alias appears in the question, whatever the answer."""
        return any(mentions(question, n) for n in self.secret.names)
