"""The actor losses by name: what ``config.learner.actor_loss`` selects.

Every entry has one signature, ``loss(terms: PolicyTerms, **options) -> (loss, aux)``, and
declares what it needs from the networks (``needs_baseline``: the actor gets a per-token value
head) and which :class:`~archer_jax.learners.learner_config.LearnerConfig` fields it takes as
``options`` (e.g. ``awr``'s β and clip). Config
validation, :class:`~archer_jax.learners.learner_config.LearnerConfig`, the actor's construction and the
actor step all read this registry; nothing else checks loss names. New objectives (offline
ArCHer, PPO, GRPO) plug in with :func:`register`::

    actor_losses.register("my_loss", lambda t: my_loss(t.advantage, t.token_logprobs, t.mask))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax

from archer_jax.learners import losses

Array = jax.Array


class PolicyTerms(NamedTuple):
    """What an actor loss sees for a batch of (observation, action) pairs."""

    advantage: Array  # [batch] A(s, a), without gradient
    token_logprobs: Array  # [batch, tokens] log π(a_t | s, a_<t), 0 at padding
    mask: Array  # [batch, tokens] float32, 1 for the action's tokens (stop token included)
    baseline: Array | None  # [batch, tokens] b_t of the token-level value head, or None
    # Action tokens per micro-batch, averaged over the step: what a mean over tokens divides by,
    # so that the step's loss does not depend on its micro-batch layout. None: sum(mask).
    token_count: Array | None = None


@dataclasses.dataclass(frozen=True)
class ActorLoss:
    """A registered actor loss and what it needs."""

    name: str
    fn: Callable[..., tuple[Array, dict[str, Array]]]
    needs_baseline: bool = False
    options: tuple[str, ...] = ()  # LearnerConfig fields passed to fn as keywords

    def __call__(self, terms: PolicyTerms, **options) -> tuple[Array, dict[str, Array]]:
        return self.fn(terms, **options)


ACTOR_LOSSES: dict[str, ActorLoss] = {}


def register(name: str, fn: Callable[..., tuple[Array, dict]], *, needs_baseline: bool = False,
             options: tuple[str, ...] = ()) -> ActorLoss:
    """Makes ``config.learner.actor_loss = name`` train the actor with ``fn(terms, **options)``,
    ``options`` naming :class:`~archer_jax.learners.learner_config.LearnerConfig` fields."""
    if name in ACTOR_LOSSES:
        raise ValueError(f"actor loss {name!r} is already registered")
    ACTOR_LOSSES[name] = ActorLoss(name, fn, needs_baseline, tuple(options))
    return ACTOR_LOSSES[name]


def get_actor_loss(name: str) -> ActorLoss:
    """The actor loss ``name``; a KeyError lists the registered ones."""
    try:
        return ACTOR_LOSSES[name]
    except KeyError:
        raise KeyError(f"unknown actor loss {name!r}; registered: {', '.join(ACTOR_LOSSES)}") from None


register("actor_pg", lambda t: losses.actor_pg_loss(t.advantage, t.token_logprobs, t.mask))
register(
    "actor_token_baseline",
    lambda t: losses.actor_token_baseline_loss(t.advantage, t.token_logprobs, t.baseline, t.mask, token_count=t.token_count),
    needs_baseline=True,
)
register(
    "awr",  # offline ArCHer's actor, on the dataset's actions (archer_jax/agents/offline_archer.py)
    lambda t, awr_beta, awr_clip: losses.awr_loss(t.advantage, t.token_logprobs, t.mask, awr_beta, awr_clip),
    options=("awr_beta", "awr_clip"),
)
