"""The environment protocol: text observations in, text actions out, and the contract every env keeps.

    obs = env.reset(seed=0)
    result = env.step("Is it an animal?")
    result.observation, result.reward, result.done, result.info

``info`` tells the ways a turn can end apart: ``success`` (the task was solved), ``at_limit``
(the env's own turn limit ended the episode), ``truncated`` (the episode was cut where the game
goes on: learners bootstrap from it), and ``invalid`` (the action was not understood; the episode
goes on). Whether a turn limit ends the game is the env's rule: where the observation shows every
turn (Twenty Questions, Guess My City) the game ends there and its last transition is terminal
(``at_limit`` and not ``truncated``); an env whose limit only cuts a rollout reports ``at_limit``
and ``truncated``. Every env here ends its games at its limit, as the official ArCHer code does;
``config.env.turn_limit`` overrides the rule for a run (:func:`archer_jax.rollout.play`).

The contract (every env here keeps it, and :class:`archer_jax.envs.pool.EnvPool` enforces the
parts marked *pool* for any env, your own ``package.module:factory`` ones included):

* **Actions**: any string is a valid input. A bad action (empty, 10 KB, emoji, control
  characters, a lone surrogate) gets an answer, usually with ``info.invalid``, never an exception.
* **Episode boundaries**: ``step()`` before the first ``reset()``, or after a step that returned
  ``done=True``, raises :class:`EnvError` naming the env and saying that ``reset()`` is needed
  (*pool*: the pool refuses such a step itself, before any env is stepped). An episode's end is
  reported once; nothing is answered past it.
* **Texts** (*pool*): observations, and every string in ``info.extra``, leave the pool as clean
  text: no control characters but tab and newline (``\\r\\n`` and ``\\r`` become ``\\n``), no
  lone surrogates (each becomes U+FFFD), so they can be tokenized, logged and saved as UTF-8
  (:meth:`archer_jax.replay.ReplayBuffer.save`). An env may echo an action's control characters
  (the question games keep the question as asked); :func:`reset_env` and :func:`step_env`, which
  the pool calls for every reset and step, clean whatever it returns with :func:`clean_text`.
* **Splits**: ``reset(seed)`` starts an episode. An env with held-out tasks (WebShop's goals) also
  takes a keyword ``split`` (``"train"`` or ``"eval"``); the pool passes it to envs whose
  ``reset`` has that parameter (rollouts: ``"train"``, evaluations: ``"eval"``) and leaves it out
  for the others.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any, NamedTuple, Protocol, runtime_checkable

SPLITS = ("train", "eval")


@dataclasses.dataclass(frozen=True)
class StepInfo:
    success: bool = False
    truncated: bool = False  # cut where the game goes on (a worker restart, a limit that only cuts): bootstrap
    invalid: bool = False
    at_limit: bool = False  # the env's own turn limit ended the episode (terminal unless truncated)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # env-specific facts (e.g. score)


class StepResult(NamedTuple):
    observation: str
    reward: float
    done: bool
    info: StepInfo

    @property
    def terminal(self) -> bool:
        """A true end of the episode: done, and not cut where the game goes on (the learners' flag)."""
        return self.done and not self.info.truncated


class EnvError(RuntimeError):
    """An environment cannot run (missing game file, unreachable server, dead worker), or was
    used out of order (``step()`` before ``reset()`` or after the episode ended)."""


def episode_over(who: str) -> EnvError:
    """The error of a ``step()`` after the episode ended (the same words for every env; ``who``
    names the env, e.g. ``"Detective"``)."""
    return EnvError(f"{who}: step() after the episode ended (done=True); call reset() first")


def not_started(who: str) -> EnvError:
    """The error of a ``step()`` before the first ``reset()``."""
    return EnvError(f"{who}: step() before reset(); call reset() first")


@runtime_checkable
class Env(Protocol):
    """One episode at a time. ``reset`` must be called before ``step`` (see the module docstring)."""

    def reset(self, seed: int | None = None) -> str:
        """Starts an episode (``seed`` picks e.g. the hidden object) and returns the first observation."""
        ...

    def step(self, action: str) -> StepResult:
        """Plays one turn. Any string is a valid input: bad actions get an answer, never an exception;
        a step before ``reset()`` or after the episode ended raises :class:`EnvError`."""
        ...


# -- the boundary: what the pool calls -------------------------------------------------------------

# C0 controls but tab and newline (carriage returns are handled first), DEL, C1 controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` without control characters (tabs and newlines stay; ``\\r\\n``/``\\r`` become
    ``\\n``) and with each lone surrogate replaced by U+FFFD: always encodable as UTF-8."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _SURROGATE.sub("\ufffd", _CONTROL.sub("", text))


def _clean_value(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {k: _clean_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    if isinstance(value, tuple):
        items = [_clean_value(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a namedtuple, or a tuple
    return value


def clean_result(result: StepResult, env_name: str = "env") -> StepResult:
    """``result`` with a clean observation and clean strings in ``info.extra``; an env that does
    not return a :class:`StepResult` is an :class:`EnvError`."""
    if not (isinstance(result, StepResult) and isinstance(result.observation, str) and isinstance(result.info, StepInfo)):
        raise EnvError(f"{env_name}.step() returned {type(result).__name__}, not a StepResult(str, float, bool, StepInfo)")
    info = result.info
    if info.extra:
        info = dataclasses.replace(info, extra=_clean_value(info.extra))
    return result._replace(observation=clean_text(result.observation), info=info)


_TAKES_SPLIT: dict[type, bool] = {}


def takes_split(env: Any) -> bool:
    """Whether ``env.reset`` has a ``split`` parameter (see the module docstring)."""
    kind = type(env)
    if kind not in _TAKES_SPLIT:
        try:
            _TAKES_SPLIT[kind] = "split" in inspect.signature(env.reset).parameters
        except (TypeError, ValueError):  # no signature (a builtin): no split
            _TAKES_SPLIT[kind] = False
    return _TAKES_SPLIT[kind]


def reset_env(env: Any, seed: int | None = None, split: str = "train") -> str:
    """``env.reset(seed)`` (with ``split=`` where the env takes it) and its first observation, clean."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    observation = env.reset(seed, split=split) if takes_split(env) else env.reset(seed)
    if not isinstance(observation, str):
        raise EnvError(f"{type(env).__name__}.reset() returned {type(observation).__name__}, not a str observation")
    return clean_text(observation)


def step_env(env: Any, action: str) -> StepResult:
    """``env.step(action)`` with its texts cleaned (:func:`clean_result`)."""
    return clean_result(env.step(action), type(env).__name__)
