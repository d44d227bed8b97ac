"""Learner batches built from texts (the library builds them from the replay buffer's token rows):
each text is tokenized into rows here and handed to the library's row builders."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from archer_jax.learners import batches
from archer_jax.models.tokenizer import Tokens, action_rows, encode, token_rows


def tokenize(tokenizer, texts: Sequence[str], max_length: int, length: int | None = None) -> Tokens:
    """``texts`` tokenized (left truncation) and padded on the tokenizer's side to ``length``."""
    return encode(tokenizer, texts, max_length=max_length, length=length)


def critic_batch(tokenizer, observations, actions, next_observations, pi_actions, rewards, terminals, *,
                 max_length: int = 512) -> batches.CriticBatch:
    """Transitions and fresh policy actions ``a_π`` (texts) as a critic batch (critic tokenizer)."""
    rows = functools.partial(token_rows, tokenizer, max_length=max_length)
    return batches.critic_batch(
        tokenizer, rows(observations), rows(actions), rows(next_observations), rows(pi_actions), rewards, terminals,
        max_length=max_length,
    )


def actor_batch(observation: Tokens, action: Tokens, critic_tokenizer, observations, action_texts, *,
                max_length: int = 512) -> batches.ActorBatch:
    """:func:`batches.actor_batch` with the observation and action texts for the critic."""
    rows = functools.partial(token_rows, critic_tokenizer, max_length=max_length)
    return batches.actor_batch(observation, action, critic_tokenizer, rows(observations), rows(action_texts),
                               max_length=max_length)


def bc_batch(tokenizer, observations, actions, *, stop_string: str = "\n",
             max_length: int = 512, max_action_length: int = 64) -> batches.BCBatch:
    """Observations (left-padded) and actions + ``stop_string`` (right-padded) in policy tokens."""
    return batches.bc_batch(
        tokenizer,
        token_rows(tokenizer, observations, max_length=max_length),
        action_rows(tokenizer, actions, stop_string=stop_string, max_action_length=max_action_length),
        max_length=max_length, max_action_length=max_action_length,
    )
