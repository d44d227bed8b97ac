"""Learner batches: their types, and their assembly from token rows (the replay buffer's).

Every batch array has the shape ``[batch, ...]``: one optimizer step's transitions (the learner
cuts them into micro-batches by memory, :mod:`archer_jax.learners.micro_batching`). Paired fields
share one length bucket (observation with next observation, action with ``a_π``), so a run
compiles a step once per (observation bucket, action bucket). Actions are short, so padding them
is cheap: ``min_action_bucket`` (the run's, :attr:`archer_jax.input_pipeline.InputPipeline.action_bucket`)
pads every action to at least the sampler's own action length, one bucket where lengths of 16,
32 and 64 tokens made three programs of each step. Text goes to token rows in
:mod:`archer_jax.input_pipeline`; here rows are only padded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from archer_jax.models.tokenizer import Tokens, pad_rows

Array = jax.Array


class CriticBatch(NamedTuple):
    """Transitions ``(s, a, r, s', terminal)`` and a fresh ``a_π ~ π(·|s)``, critic-tokenized."""

    observation: Tokens
    action: Tokens
    next_observation: Tokens
    pi_action: Tokens
    reward: Array  # float32
    terminal: Array  # 1 = the game ended (won, or its turn limit); 0 = it goes on, or was cut where it goes on


class ActorBatch(NamedTuple):
    """Observations with a fresh ``a_π``: policy tokens for log-probs, critic tokens for ``A``."""

    observation: Tokens  # policy tokenizer, left-padded
    action: Tokens  # a_π, policy token ids (stop token included), right-padded
    critic_observation: Tokens
    critic_action: Tokens


class BCBatch(NamedTuple):
    """Observations and the actions to imitate, policy-tokenized."""

    observation: Tokens  # left-padded
    action: Tokens  # right-padded, stop token included


MIN_BUCKET = 16  # the shortest length bucket (tokenizer.bucket_length's default)


def pad(tokenizer, rows: Sequence[np.ndarray], max_length: int, length: int | None = None,
        min_bucket: int = MIN_BUCKET) -> Tokens:
    """Token id rows padded on the tokenizer's side to ``length`` or their length bucket (at least
    ``min_bucket``)."""
    return pad_rows(rows, tokenizer.pad_token_id, left=tokenizer.padding_side == "left", max_length=max_length,
                    length=length, min_bucket=min(min_bucket, max_length))


def pad_pair(tokenizer, a: Sequence[np.ndarray], b: Sequence[np.ndarray], max_length: int,
             min_bucket: int = MIN_BUCKET) -> tuple[Tokens, Tokens]:
    """Two lists of token rows padded to one shared length bucket (at least ``min_bucket``)."""
    both, n = pad(tokenizer, [*a, *b], max_length, min_bucket=min_bucket), len(a)
    return Tokens(both.ids[:n], both.mask[:n]), Tokens(both.ids[n:], both.mask[n:])


def right_padded(tokens: np.ndarray, lengths: np.ndarray, pad_id: int) -> Tokens:
    """Sampled action ids (``[batch, max_new_tokens]``) with the mask of each row's length."""
    mask = (np.arange(tokens.shape[1])[None] < np.asarray(lengths)[:, None]).astype(np.int32)
    return Tokens(np.where(mask == 1, tokens, pad_id).astype(np.int32), mask)


def critic_batch(
    tokenizer,
    observations: Sequence[np.ndarray],
    actions: Sequence[np.ndarray],
    next_observations: Sequence[np.ndarray],
    pi_actions: Sequence[np.ndarray],
    rewards: Sequence[float],
    terminals: Sequence[bool],
    *,
    max_length: int = 512,
    min_action_bucket: int = MIN_BUCKET,
) -> CriticBatch:
    """Transitions and fresh policy actions ``a_π``, in critic token rows, as a critic batch."""
    obs, next_obs = pad_pair(tokenizer, observations, next_observations, max_length)
    act, pi_act = pad_pair(tokenizer, actions, pi_actions, max_length, min_bucket=min_action_bucket)
    return CriticBatch(obs, act, next_obs, pi_act, np.asarray(rewards, np.float32), np.asarray(terminals, np.float32))


def actor_batch(
    observation: Tokens,
    action: Tokens,
    critic_tokenizer,
    critic_observations: Sequence[np.ndarray],
    critic_actions: Sequence[np.ndarray],
    *,
    max_length: int = 512,
    min_action_bucket: int = MIN_BUCKET,
) -> ActorBatch:
    """Policy tokens of the observations (left-padded) and of ``a_π`` (right-padded, e.g. from
    :func:`right_padded` on the sampler's output), plus both in critic token rows."""
    return ActorBatch(
        observation,
        action,
        pad(critic_tokenizer, critic_observations, max_length),
        pad(critic_tokenizer, critic_actions, max_length, min_bucket=min_action_bucket),
    )


def bc_batch(
    tokenizer,
    observations: Sequence[np.ndarray],
    actions: Sequence[np.ndarray],
    *,
    max_length: int = 512,
    max_action_length: int = 64,
    min_action_bucket: int = MIN_BUCKET,
) -> BCBatch:
    """Observation rows (left-padded) and action rows (right-padded) in policy tokens."""
    obs = pad(tokenizer, observations, max_length)
    act = pad_rows(actions, tokenizer.pad_token_id, left=False, max_length=max_action_length,
                   min_bucket=min(min_action_bucket, max_action_length))
    return BCBatch(obs, act)
