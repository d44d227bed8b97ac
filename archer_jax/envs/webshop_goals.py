"""WebShop's goals: which goal an episode plays (from its seed and split), and the server's count.

The WebShop server (princeton-nlp/WebShop, ``web_agent_site.app``) holds a list of goals (an
instruction with its target product, attributes and options), shuffled with a fixed seed, so a
goal index names the same goal on every server started the same way. With all products loaded
(as ArCHer's README has it) the list holds the 12,087 human-written instructions; a server on
the default 1,000-product subset holds fewer. Session ``fixed_<n>`` plays goal ``n``.

Splits. WebShop's own baselines (``baseline_models/env.py``) use goals 0-499 as the test split,
500-1499 as the dev split and 1500 on for training. The official ArCHer code drew its goals from
2000-2099 (``webshop_lower``/``webshop_upper``) for training and evaluation alike. Here:

* ``train_goals`` (default ``(1500, 12087)``, WebShop's training split) are the goals of
  rollouts (and SFT demonstrations);
* ``eval_goals`` (default ``(500, 1500)``, WebShop's dev split) are the goals of evaluations;
* the test split 0-499 is left alone for final reports (set ``eval_goals=(0, 500)`` for those).

Each is a half-open range ``(start, end)`` of goal indices. A seed plays goal
``start + seed % (end - start)`` of its split's range: the library's training seeds (32-bit
values from ``numpy.random.SeedSequence``) spread over the training goals, and its evaluation
seeds (``EVAL_SEED + i``, consecutive) play consecutive, distinct goals, the same in every
evaluation. ``reset()`` without a seed draws a goal of the split's range at random.

The server's goal count. The server has no way to say how many goals it holds: it answers a
session past the end of its list with HTTP 500 (``goals[idx]`` raises IndexError). So at the
first reset in each process the env asks the server for the highest goal its ranges use (one
request); when the server refuses it, it finds the count by bisection over ``fixed_<n>``
sessions (about 14 requests) and raises a one-line :class:`~archer_jax.envs.base.EnvError`
naming the count and the ranges that go past it. Otherwise the configured ranges are used as
they are.
"""

from __future__ import annotations

import dataclasses
import operator
import random
from collections.abc import Callable
from typing import Any

from archer_jax.envs.base import SPLITS

TRAIN_GOALS = (1500, 12087)  # WebShop's training split, on a server with all products
EVAL_GOALS = (500, 1500)  # WebShop's dev split
TEST_GOALS = (0, 500)  # WebShop's test split


def goal_range(name: str, value: Any) -> tuple[int, int]:
    """``value`` as a goal range ``(start, end)`` with ``0 <= start < end``, or a one-line
    ValueError naming ``name``."""
    try:
        start, end = (operator.index(v) for v in value)
        if any(isinstance(v, bool) for v in value):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (start, end) of goal indices, got {value!r}") from None
    if not 0 <= start < end:
        raise ValueError(f"{name} must satisfy 0 <= start < end (a half-open range of goal indices), got {value!r}")
    return start, end


@dataclasses.dataclass(frozen=True)
class GoalRanges:
    """The goal ranges of the two splits (see the module docstring)."""

    train: tuple[int, int] = TRAIN_GOALS
    eval: tuple[int, int] = EVAL_GOALS

    def __post_init__(self) -> None:
        object.__setattr__(self, "train", goal_range("train_goals", self.train))
        object.__setattr__(self, "eval", goal_range("eval_goals", self.eval))

    def of(self, split: str) -> tuple[int, int]:
        """The range of ``split`` ("train" or "eval")."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        return self.train if split == "train" else self.eval

    def goal(self, seed: int, split: str = "train") -> int:
        """The goal that ``seed`` plays on ``split``: ``start + seed % (end - start)``."""
        seed = operator.index(seed)
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        start, end = self.of(split)
        return start + seed % (end - start)

    def random_goal(self, split: str = "train", rng: random.Random | None = None) -> int:
        """A goal of ``split``'s range drawn uniformly (with ``rng``, or the ``random`` module's)."""
        start, end = self.of(split)
        return (rng or random).randrange(start, end)

    @property
    def highest(self) -> int:
        """The highest goal index either range uses."""
        return max(self.train[1], self.eval[1]) - 1

    @property
    def overlap(self) -> bool:
        """Whether some goal is in both ranges (evaluations then are not on held-out goals)."""
        return self.train[0] < self.eval[1] and self.eval[0] < self.train[1]

    def past(self, count: int) -> str:
        """The options whose range goes past a server with ``count`` goals, e.g.
        ``"train_goals=(1500, 12087)"``."""
        return " and ".join(f"{name}_goals={r}" for name, r in (("train", self.train), ("eval", self.eval)) if r[1] > count)


def count_goals(has_goal: Callable[[int], bool], missing: int) -> int:
    """The number of goals of a server whose goals are ``0 .. count - 1``, by bisection, given
    ``has_goal(n)`` and an index ``missing`` it does not have."""
    if not has_goal(0):
        return 0
    low, high = 0, missing  # has_goal(low), not has_goal(high)
    while high - low > 1:
        middle = (low + high) // 2
        if has_goal(middle):
            low = middle
        else:
            high = middle
    return high
