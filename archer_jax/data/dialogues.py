"""Offline dialogues of Twenty Questions and Guess My City: the file formats and their transitions.

Two JSON formats, each a list of games:

* LMRL-Gym Twenty Questions: ``{"lines": ["Is it an animal? No.", ...], "correct": bool, "word": ["Dog", ...]}``.
  Each line is a question and ``" Yes."`` or ``" No."``; ``correct`` says the last line found the word.
* the official Guess My City dialogues: ``{"conversation": ["Is it in Asia? Yes, my city is in Asia.", ...],
  "done": bool, "word": "bogota,colombia"}``. Each entry is the question, up to and including its
  first ``?``, then the answer text. ``done`` is kept in the games as read (it is not used).

A game becomes the transitions the embedded env would have recorded (:mod:`archer_jax.envs.question_game`):
the observation starts as ``"Questions:\\n"`` and each turn appends ``"<question> <answer>\\n"``, the
question put through the env's one-line cleaning (:func:`one_line`); reward -1 per turn and 0 on
the winning turn, which is the only terminal one. A game that ends without a win is truncated:
no transition of it is terminal (unlike the official OfflineArcher conversion, which marks the
last step of every 20-line game terminal).

* Twenty Questions: the last line of a ``correct`` game wins.
* Guess My City: a turn wins by the env's own rule (:meth:`~archer_jax.envs.guess_my_city.GuessMyCity.wins`:
  the secret city's name or an alias appears in the question) for the city named by ``word``. A few
  words of the official file are not among the env's 91 cities (e.g. ``"new york,usa"``): for them
  a turn wins when the city part of ``word`` (before the comma) appears in the question as whole
  words, ignoring case and accents. The episode ends at its first winning turn; later lines are dropped.

Each transition is a dict with exactly the keys of :data:`TRANSITION_KEYS`.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from archer_jax.envs import guess_my_city as gmc
from archer_jax.envs.oracle import NO, YES, mentions
from archer_jax.envs.question_game import START, one_line

log = logging.getLogger(__name__)

TRANSITION_KEYS = (
    "observation", "action", "next_observation", "reward", "terminal", "turn", "episode_return", "success", "secret",
)
LMRL_ANSWERS = (YES, NO)


def _episode(turns: Sequence[tuple[str, str]], win: int | None, secret: str) -> list[dict[str, Any]]:
    """The transitions of ``turns`` (``(question, answer)`` pairs), won at turn ``win`` (None: never)."""
    n = len(turns) if win is None else win + 1
    rewards = [0.0 if t == win else -1.0 for t in range(n)]
    episode_return = float(sum(rewards))
    out, observation = [], START
    for t in range(n):
        question, answer = turns[t]
        action = one_line(question)
        next_observation = f"{observation}{action} {answer}\n"
        out.append(dict(
            observation=observation, action=action, next_observation=next_observation, reward=rewards[t],
            terminal=t == win, turn=t, episode_return=episode_return, success=win is not None, secret=secret,
        ))
        observation = next_observation
    return out


# ---- reading and checking ---------------------------------------------------------------------------


def _read_json_list(path: str | Path) -> list:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        games = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(games, list):
        raise ValueError(f"{path}: expected a JSON list of games, got {_json_kind(games)}")
    return games


def _json_kind(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words (``"an object"``, ``"a string"``, ...)."""
    kinds = {dict: "an object", str: "a string", bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _field(game: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(game, dict):
        raise ValueError(f"{where}: expected an object, got {type(game).__name__}")
    if key not in game:
        raise ValueError(f"{where}: missing field {key!r}")
    value = game[key]
    if not isinstance(value, kind):
        raise ValueError(f"{where}: field {key!r} has type {type(value).__name__}")
    return value


def _strings(game: dict, key: str, where: str) -> list[str]:
    values = _field(game, key, list, where)
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise ValueError(f"{where}: {key}[{i}] is a {type(v).__name__}, not a string")
    return values


def _lmrl_turns(game: Any, where: str) -> list[tuple[str, str]]:
    """The ``(question, answer)`` pairs of an LMRL-Gym game, or a ValueError naming ``where``."""
    lines = _strings(game, "lines", where)
    _field(game, "correct", bool, where)
    _lmrl_secret(game, where)
    turns = []
    for i, line in enumerate(lines):
        answer = next((a for a in LMRL_ANSWERS if line.endswith(" " + a)), None)
        if answer is None:
            raise ValueError(f"{where}: line {i} {line!r} ends with neither ' {YES}' nor ' {NO}'")
        turns.append((line[: -len(answer) - 1], answer))
    return turns


def _lmrl_secret(game: dict, where: str) -> str:
    word = _field(game, "word", (list, str), where)
    names = [word] if isinstance(word, str) else _strings(game, "word", where)
    if not names or not names[0].strip():
        raise ValueError(f"{where}: field 'word' is empty")
    return names[0]


def _city_turns(game: Any, where: str) -> list[tuple[str, str]]:
    """The ``(question, answer)`` pairs of a Guess My City game, or a ValueError naming ``where``."""
    conversation = _strings(game, "conversation", where)
    _field(game, "done", bool, where)
    _city_word(game, where)
    turns = []
    for i, entry in enumerate(conversation):
        end = entry.find("?")
        if end < 0:
            raise ValueError(f"{where}: conversation[{i}] {entry[:80]!r} has no '?' ending a question")
        turns.append((entry[: end + 1], " ".join(entry[end + 1 :].split())))
    return turns


def _city_word(game: dict, where: str) -> str:
    word = _field(game, "word", str, where)
    if not word.strip():
        raise ValueError(f"{where}: field 'word' is empty")
    return word


def _read(path: str | Path, check: Callable[[Any, str], object]) -> list[dict]:
    games = _read_json_list(path)
    for i, game in enumerate(games):
        check(game, f"{path}: game {i}")
    return games


def read_lmrl_20q(path: str | Path) -> list[dict]:
    """The games of an LMRL-Gym Twenty Questions file, checked (a bad game is a ValueError naming it)."""
    return _read(path, _lmrl_turns)


def read_city_dialogues(path: str | Path) -> list[dict]:
    """The games of an official Guess My City dialogue file, checked (a bad game is a ValueError naming it)."""
    return _read(path, _city_turns)


# ---- transitions ------------------------------------------------------------------------------------


def lmrl_20q_transitions(game: dict) -> list[dict[str, Any]]:
    """The transitions of one LMRL-Gym game: the last line of a correct game wins (module docstring)."""
    turns = _lmrl_turns(game, "game")
    win = len(turns) - 1 if game["correct"] and turns else None
    return _episode(turns, win, _lmrl_secret(game, "game"))


@functools.cache
def _city_game(name: str) -> gmc.GuessMyCity:
    """A Guess My City game started on the city officially named ``name`` (one shared oracle)."""
    game = gmc.GuessMyCity(oracle=_city_oracle())
    game.start(gmc.city_named(name))
    return game


@functools.cache
def _city_oracle() -> gmc.CityOracle:
    return gmc.CityOracle()


def city_wins(word: str) -> Callable[[str, str], bool]:
    """``wins(question, answer)`` for the secret city ``word`` (e.g. ``"bogota,colombia"``): the env's
    rule, or for a city the env does not know, the city part of ``word`` named in the question."""
    try:
        city = gmc.city_named(word)
    except KeyError:
        name = word.split(",")[0]
        log.debug("Guess My City: %r is not among the env's cities; a question naming %r wins", word, name)
        return lambda question, answer: mentions(question, name)
    return _city_game(city.name).wins


def city_transitions(game: dict) -> list[dict[str, Any]]:
    """The transitions of one Guess My City game, up to its first winning turn (module docstring)."""
    turns = _city_turns(game, "game")
    word = _city_word(game, "game")
    wins = city_wins(word)
    win = next((t for t, (question, answer) in enumerate(turns) if wins(one_line(question), answer)), None)
    return _episode(turns, win, word)


# ---- writing ----------------------------------------------------------------------------------------


def _write(path: str | Path, games: Sequence[dict], check: Callable[[Any, str], object]) -> Path:
    path = Path(path)
    games = list(games)
    for i, game in enumerate(games):
        check(game, f"{path}: game {i}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        json.dump(games, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return path


def write_lmrl_20q(path: str | Path, games: Sequence[dict]) -> Path:
    """Writes ``games`` as an LMRL-Gym Twenty Questions file (checked first, as the reader checks them)."""
    return _write(path, games, _lmrl_turns)


def write_city_dialogues(path: str | Path, games: Sequence[dict]) -> Path:
    """Writes ``games`` as an official Guess My City dialogue file (checked first, as the reader checks them)."""
    return _write(path, games, _city_turns)
