"""Host-side assembly of learner batches: tokenization to length buckets, micro-batch layout.

Every batch array has the shape ``[micro_batches, batch, ...]`` the steps expect. Paired fields
share one length bucket (observation with next observation, action with ``a_π``), so a run
compiles a step once per (observation bucket, action bucket).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from archer_jax.learners.critic import Tokens
from archer_jax.learners.steps import ActorBatch, BCBatch, CriticBatch
from archer_jax.models.tokenizer import encode, pad_rows, token_rows


def micro_batches(array: np.ndarray, count: int) -> np.ndarray:
    """``[count * batch, ...] -> [count, batch, ...]``."""
    if array.shape[0] % count:
        raise ValueError(f"{array.shape[0]} rows do not split into {count} micro-batches")
    return array.reshape(count, array.shape[0] // count, *array.shape[1:])


def tokenize(tokenizer, texts: Sequence[str], max_length: int, length: int | None = None) -> Tokens:
    """``texts`` tokenized (left truncation) and padded on the tokenizer's side to ``length``."""
    enc = encode(tokenizer, texts, max_length=max_length, length=length)
    return Tokens(enc.input_ids, enc.attention_mask)


def pad(tokenizer, rows: Sequence[np.ndarray], max_length: int, length: int | None = None) -> Tokens:
    """Token id rows (as :func:`archer_jax.models.tokenizer.token_rows` gives, e.g. kept in the
    replay buffer) padded on the tokenizer's side to ``length`` or their length bucket."""
    enc = pad_rows(rows, tokenizer.pad_token_id, left=tokenizer.padding_side == "left", max_length=max_length,
                   length=length)
    return Tokens(enc.input_ids, enc.attention_mask)


def pad_pair(tokenizer, a: Sequence[np.ndarray], b: Sequence[np.ndarray], max_length: int) -> tuple[Tokens, Tokens]:
    """Two lists of token rows padded to one shared length bucket."""
    both, n = pad(tokenizer, [*a, *b], max_length), len(a)
    return Tokens(both.ids[:n], both.mask[:n]), Tokens(both.ids[n:], both.mask[n:])


def _split(tokens: Tokens, count: int) -> Tokens:
    return Tokens(micro_batches(tokens.ids, count), micro_batches(tokens.mask, count))


def critic_batch_from_rows(
    tokenizer,
    observations: Sequence[np.ndarray],
    actions: Sequence[np.ndarray],
    next_observations: Sequence[np.ndarray],
    pi_actions: Sequence[np.ndarray],
    rewards: Sequence[float],
    terminals: Sequence[bool],
    *,
    micro_batch_count: int,
    max_length: int = 512,
) -> CriticBatch:
    """Transitions and fresh policy actions ``a_π``, already in critic token rows, as a critic batch."""
    obs, next_obs = pad_pair(tokenizer, observations, next_observations, max_length)
    act, pi_act = pad_pair(tokenizer, actions, pi_actions, max_length)
    n = micro_batch_count
    return CriticBatch(
        _split(obs, n),
        _split(act, n),
        _split(next_obs, n),
        _split(pi_act, n),
        micro_batches(np.asarray(rewards, np.float32), n),
        micro_batches(np.asarray(terminals, np.float32), n),
    )


def critic_batch(
    tokenizer,
    observations: Sequence[str],
    actions: Sequence[str],
    next_observations: Sequence[str],
    pi_actions: Sequence[str],
    rewards: Sequence[float],
    terminals: Sequence[bool],
    *,
    micro_batch_count: int,
    max_length: int = 512,
) -> CriticBatch:
    """Transitions and fresh policy actions ``a_π`` (texts) as a critic batch (critic tokenizer)."""
    rows = functools.partial(token_rows, tokenizer, max_length=max_length)
    return critic_batch_from_rows(
        tokenizer, rows(observations), rows(actions), rows(next_observations), rows(pi_actions), rewards, terminals,
        micro_batch_count=micro_batch_count, max_length=max_length,
    )


def right_padded(tokens: np.ndarray, lengths: np.ndarray, pad_id: int) -> Tokens:
    """Sampled action ids (``[batch, max_new_tokens]``) with the mask of each row's length."""
    mask = (np.arange(tokens.shape[1])[None] < np.asarray(lengths)[:, None]).astype(np.int32)
    return Tokens(np.where(mask == 1, tokens, pad_id).astype(np.int32), mask)


def actor_batch_from_rows(
    observation: Tokens,
    action: Tokens,
    critic_tokenizer,
    critic_observations: Sequence[np.ndarray],
    critic_actions: Sequence[np.ndarray],
    *,
    micro_batch_count: int,
    max_length: int = 512,
) -> ActorBatch:
    """Policy tokens of the observations (left-padded) and of ``a_π`` (right-padded, e.g. from
    :func:`right_padded` on the sampler's output), plus both in critic token rows."""
    n = micro_batch_count
    return ActorBatch(
        _split(observation, n),
        _split(action, n),
        _split(pad(critic_tokenizer, critic_observations, max_length), n),
        _split(pad(critic_tokenizer, critic_actions, max_length), n),
    )


def actor_batch(
    observation: Tokens,
    action: Tokens,
    critic_tokenizer,
    observations: Sequence[str],
    action_texts: Sequence[str],
    *,
    micro_batch_count: int,
    max_length: int = 512,
) -> ActorBatch:
    """:func:`actor_batch_from_rows` with the observation and action texts for the critic."""
    rows = functools.partial(token_rows, critic_tokenizer, max_length=max_length)
    return actor_batch_from_rows(
        observation, action, critic_tokenizer, rows(observations), rows(action_texts),
        micro_batch_count=micro_batch_count, max_length=max_length,
    )


def action_rows(tokenizer, actions: Sequence[str], *, stop_string: str = "\n", max_action_length: int = 64) -> list[np.ndarray]:
    """Each action + ``stop_string`` in policy token rows, tokenized on its own (no special
    tokens), as the sampler produces it after the observation. An action longer than
    ``max_action_length`` tokens keeps its beginning (what the sampler would have produced)."""
    texts = [a + stop_string for a in actions]
    rows = token_rows(tokenizer, texts, max_length=1 << 30, add_special_tokens=False)
    return [r[:max_action_length] for r in rows]


def bc_batch_from_rows(
    tokenizer,
    observations: Sequence[np.ndarray],
    actions: Sequence[np.ndarray],
    *,
    micro_batch_count: int,
    max_length: int = 512,
    max_action_length: int = 64,
) -> BCBatch:
    """Observation rows (left-padded) and action rows (right-padded) in policy tokens."""
    obs = pad(tokenizer, observations, max_length)
    act = pad_rows(actions, tokenizer.pad_token_id, left=False, max_length=max_action_length)
    n = micro_batch_count
    return BCBatch(_split(obs, n), _split(Tokens(act.input_ids, act.attention_mask), n))


def bc_batch(
    tokenizer,
    observations: Sequence[str],
    actions: Sequence[str],
    *,
    micro_batch_count: int,
    stop_string: str = "\n",
    max_length: int = 512,
    max_action_length: int = 64,
) -> BCBatch:
    """Observations (left-padded) and actions + ``stop_string`` (right-padded) in policy tokens."""
    return bc_batch_from_rows(
        tokenizer,
        token_rows(tokenizer, observations, max_length=max_length),
        action_rows(tokenizer, actions, stop_string=stop_string, max_action_length=max_action_length),
        micro_batch_count=micro_batch_count,
        max_length=max_length,
        max_action_length=max_action_length,
    )


def _batch_of_generation(generation, pad_id: int, critic_tokenizer, critic_observations, *, micro_batch_count: int,
                         max_length: int) -> ActorBatch:
    """The actor batch of a sampler generation: its prompt encoding and sampled ids (stop token
    included) as policy tokens, the observations and sampled texts in critic token rows."""
    return actor_batch_from_rows(
        Tokens(generation.prompt.input_ids, generation.prompt.attention_mask),
        right_padded(generation.tokens, generation.lengths, pad_id),
        critic_tokenizer,
        critic_observations,
        token_rows(critic_tokenizer, generation.texts, max_length=max_length),
        micro_batch_count=micro_batch_count,
        max_length=max_length,
    )


def sampled_actor_batch(
    sampler,
    critic_tokenizer,
    observations: Sequence[str],
    key,
    params,
    *,
    micro_batch_count: int,
    model_state=None,
    max_length: int = 512,
):
    """Draws a fresh ``a_π ~ π(·|s)`` for each observation with ``sampler`` (a
    :class:`archer_jax.sampling.Sampler`) and builds the actor batch from it.

    The policy tokens are the sampler's own (its prompt encoding and the sampled ids, stop token
    included), so the actor trains on exactly what was sampled. Returns ``(batch, generation)``;
    ``generation.texts`` are the ``a_π`` texts, e.g. for a critic batch's V-target.
    """
    generation = sampler.generate(observations, key, params, model_state=model_state)
    critic_rows = token_rows(critic_tokenizer, observations, max_length=max_length)
    batch = _batch_of_generation(generation, sampler.pad_id, critic_tokenizer, critic_rows,
                                 micro_batch_count=micro_batch_count, max_length=max_length)
    return batch, generation


def sampled_actor_batch_from_rows(
    sampler,
    critic_tokenizer,
    policy_observations: Sequence[np.ndarray],
    critic_observations: Sequence[np.ndarray],
    key,
    params,
    *,
    micro_batch_count: int,
    model_state=None,
    max_length: int = 512,
):
    """:func:`sampled_actor_batch` from observations already in policy and critic token rows
    (the replay buffer's): nothing is re-tokenized but the sampled ``a_π`` for the critic."""
    generation = sampler.generate_rows(policy_observations, key, params, model_state=model_state)
    batch = _batch_of_generation(generation, sampler.pad_id, critic_tokenizer, critic_observations,
                                 micro_batch_count=micro_batch_count, max_length=max_length)
    return batch, generation
