"""Critic and actor batches at their real lengths: a step's sequences packed several to a row.

    batch = packed_critic_batch(tokenizer, obs, act, next_obs, pi_act, rewards, terminals, groups=1)
    batch.online.ids    # [groups, rows, length]: each group's observations, then its actions
    batch.target.ids    # [groups, rows, length]: observations, next observations, then a_π
    batch.reward        # [groups, transitions per group]
    actor = packed_actor_batch(policy_pad, critic_pad, prompts, pi_ids, critic_obs, critic_pi, ...)
    actor.policy.ids    # [groups, rows, length]: each observation followed by its a_π, policy ids

A padded critic batch (:class:`~archer_jax.learners.batches.CriticBatch`) pads every row to the
bucket of the batch's longest: with 20-turn games in the buffer most of its positions hold no
token. Here the online critic's sequences (s, a) and the target critic's (s, s', a_π) are packed
first-fit into rows of that bucket length (:func:`archer_jax.models.packing.pack`), each
attending only within itself, so an encoder pass costs about the tokens it holds.

The transitions are cut into ``groups`` equal runs, in order, each packed into rows of its own:
with the groups split over the mesh's batch axes, every device encodes and gathers only its own
sequences, and micro-batches are whole groups (:func:`group_count`). Both packs share one row length, the
bucket of the step's longest sequence, and their row counts are rounded up on a ladder
(:func:`row_bucket`), so a run compiles a few shapes. An actor batch
(:class:`PackedActorBatch`) packs the policy's ``s + a_π`` sequences, whose hidden states the
step gathers at the action's positions, and the critic's s and a_π, in the same groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Sharding

from archer_jax.learners.micro_batching import parse_micro_batch_size
from archer_jax.models.packing import pack
from archer_jax.models.tokenizer import Tokens, bucket_length, next_power_of_two

Array = jax.Array

MIN_BUCKET = 16  # the shortest row length, as a padded batch's


class PackedTokens(NamedTuple):
    """Groups of sequences packed into rows (:func:`archer_jax.models.packing.pack`'s arrays per group)."""

    ids: Array  # [groups, rows, length] int32
    segments: Array  # [groups, rows, length] int32: 1, 2, ... per sequence in a row; 0 = padding
    positions: Array  # [groups, rows, length] int32: each token's index within its sequence
    starts: Array  # [groups, sequences, 2] int32: (row, column) of each sequence's first token in its group


class PackedCriticBatch(NamedTuple):
    """Transitions ``(s, a, r, s', terminal)`` and a fresh ``a_π``, packed by group (see the module docstring)."""

    unit = "groups"  # what the step's micro-batches are counted in (its log line)
    switch = "pack_critic"  # the learner key that turns packing off

    online: PackedTokens  # per group: its transitions' s, then their a
    target: PackedTokens  # per group: s, then s', then a_π
    reward: Array  # [groups, transitions per group] float32
    terminal: Array  # [groups, transitions per group] float32: 1 where the game ended

    def describe(self) -> str:
        """The shape in the step's log line: rows of each pack and their length."""
        return f"packed rows {self.online.ids.shape[1]}+{self.target.ids.shape[1]} of {self.online.ids.shape[2]} tokens"


def batch_shardings(batch_sharding: Callable[[int], Sharding]) -> PackedCriticBatch:
    """A packed critic batch's shardings: its groups over the mesh's batch axes (``batch_sharding(ndim)``,
    :meth:`~archer_jax.learners.networks.Networks.batch_sharding`)."""
    packed = PackedTokens(*(batch_sharding(3),) * 4)
    return PackedCriticBatch(packed, packed, batch_sharding(2), batch_sharding(2))


def micro_batch_transitions(micro_batch_size: int | str = "auto", limit: int | None = None) -> int | None:
    """The transitions of a micro-batch when its size is known: ``micro_batch_size`` if fixed, else
    ``limit`` ("auto"'s largest: a CPU's ``batch_size``); None when "auto" chooses by memory."""
    return parse_micro_batch_size(micro_batch_size) or limit


def group_count(transitions: int, multiple: int, micro_batch_size: int | str = "auto", limit: int | None = None,
                factor: int = 1) -> int:
    """The groups a step's ``transitions`` are packed in: one per device of the mesh's batch axes
    (``multiple`` of them) and micro-batch, a micro-batch holding :func:`micro_batch_transitions`,
    else ``factor`` per device (what "auto" chose by memory: the step's micro-batches then hold
    one or more of them)."""
    size = micro_batch_transitions(micro_batch_size, limit)
    return multiple * factor if size is None else multiple * max(1, transitions // size)


def row_bucket(rows: int) -> int:
    """The row count a pack of ``rows`` rows is padded to: ``rows`` up to 4; then half octaves
    (6, 8, 12, 16, 24, 32, 48, 64), and quarter octaves from 64 (80, 96, 112, 128, 160, ...).
    Below 64 rows a shape's compile costs more than the padding it saves; above, steps are dearer."""
    if rows <= 4:
        return max(rows, 1)
    power = next_power_of_two(rows) // 2  # rows in (power, 2 * power]
    return next(power * k // 4 for k in ((5, 6, 7, 8) if power >= 64 else (6, 8)) if power * k // 4 >= rows)


def row_length(groups: Sequence[Sequence[np.ndarray]], max_length: int, min_bucket: int = MIN_BUCKET) -> int:
    """The bucket length of the longest sequence of ``groups`` (cut to ``max_length``)."""
    longest = max(min(len(r), max_length) for group in groups for r in group)
    return bucket_length(longest, max_length, min(min_bucket, max_length))


def packed_groups(groups: Sequence[Sequence[np.ndarray]], pad_id: int, *, max_length: int,
                  length: int | None = None) -> PackedTokens:
    """Each group's sequences packed into rows of one shared length (``length``, by default the
    bucket of the longest sequence) and one shared, bucketed row count."""
    length = row_length(groups, max_length) if length is None else length
    packs = [pack(group, pad_id, max_length=max_length, length=length) for group in groups]
    rows = row_bucket(max(p.ids.shape[0] for p in packs))

    def padded(a: np.ndarray, value: int) -> np.ndarray:
        return np.pad(a, ((0, rows - a.shape[0]), (0, 0)), constant_values=value)

    return PackedTokens(np.stack([padded(p.ids, pad_id) for p in packs]), np.stack([padded(p.segments, 0) for p in packs]),
                        np.stack([padded(p.positions, 0) for p in packs]), np.stack([p.starts for p in packs]))


def packed_critic_batch(
    tokenizer,
    observations: Sequence[np.ndarray],
    actions: Sequence[np.ndarray],
    next_observations: Sequence[np.ndarray],
    pi_actions: Sequence[np.ndarray],
    rewards: Sequence[float],
    terminals: Sequence[bool],
    *,
    groups: int = 1,
    max_length: int = 512,
) -> PackedCriticBatch:
    """Transitions and fresh policy actions ``a_π`` in critic token rows, packed in ``groups``
    equal runs of transitions (their count a multiple of ``groups``)."""
    n = len(observations)
    if n == 0 or n % groups:
        raise ValueError(f"{n} transitions do not cut into {groups} equal groups (the mesh's batch axes)")
    per = n // groups
    runs = [slice(g * per, (g + 1) * per) for g in range(groups)]
    online = [[*observations[r], *actions[r]] for r in runs]
    target = [[*observations[r], *next_observations[r], *pi_actions[r]] for r in runs]
    pad_id, length = tokenizer.pad_token_id, row_length(online + target, max_length)  # one length: fewer shapes
    return PackedCriticBatch(packed_groups(online, pad_id, max_length=max_length, length=length),
                             packed_groups(target, pad_id, max_length=max_length, length=length),
                             np.asarray(rewards, np.float32).reshape(groups, per),
                             np.asarray(terminals, np.float32).reshape(groups, per))


class PackedActorBatch(NamedTuple):
    """An actor batch (:class:`~archer_jax.learners.batches.ActorBatch`) packed by group: each
    observation followed by its ``a_π`` as one policy sequence, and the critic's s and a_π."""

    unit = "groups"  # what the step's micro-batches are counted in (its log line)
    switch = "pack_actor"  # the learner key that turns packing off

    policy: PackedTokens  # per group: each transition's observation + a_π, in policy ids
    prompt_length: Array  # [groups, transitions per group] int32: the observation's tokens in each
    action: Tokens  # [groups, transitions per group, action length]: a_π right-padded, its mask
    critic: PackedTokens  # per group: the critic's s of each transition, then its a_π

    def describe(self) -> str:
        """The shape in the step's log line: rows of each pack and their length."""
        return (f"packed policy rows {self.policy.ids.shape[1]} of {self.policy.ids.shape[2]} tokens, critic rows "
                f"{self.critic.ids.shape[1]} of {self.critic.ids.shape[2]}")


def actor_batch_shardings(batch_sharding: Callable[[int], Sharding]) -> PackedActorBatch:
    """A packed actor batch's shardings: its groups over the mesh's batch axes."""
    packed, tokens = PackedTokens(*(batch_sharding(3),) * 4), Tokens(batch_sharding(3), batch_sharding(3))
    return PackedActorBatch(packed, batch_sharding(2), tokens, packed)


def packed_actor_batch(
    policy_pad_id: int,
    critic_pad_id: int,
    prompts: Sequence[np.ndarray],
    actions: Sequence[np.ndarray],
    critic_observations: Sequence[np.ndarray],
    critic_actions: Sequence[np.ndarray],
    *,
    prompt_limit: int,
    action_length: int,
    groups: int = 1,
    max_length: int = 512,
) -> PackedActorBatch:
    """The rows of an actor batch (policy prompts, each cut to its last ``prompt_limit`` tokens as
    the sampler cuts it; sampled ``a_π`` ids of at most ``action_length``; the critic's s and a_π,
    cut to ``max_length``) packed in ``groups`` equal runs of transitions."""
    n = len(prompts)
    if n == 0 or n % groups:
        raise ValueError(f"{n} transitions do not cut into {groups} equal groups (the mesh's batch axes)")
    if any(len(a) > action_length for a in actions):
        raise ValueError(f"an a_π has more than action_length={action_length} tokens")
    prompts = [np.asarray(p, np.int32)[-prompt_limit:] for p in prompts]
    per = n // groups
    runs = [slice(g * per, (g + 1) * per) for g in range(groups)]
    sequences = [[np.concatenate([p, np.asarray(a, np.int32)]) for p, a in zip(prompts[r], actions[r])] for r in runs]
    critic = [[*critic_observations[r], *critic_actions[r]] for r in runs]
    ids = np.full((n, action_length), policy_pad_id, np.int32)
    mask = np.zeros((n, action_length), np.int32)
    for i, a in enumerate(actions):
        ids[i, :len(a)], mask[i, :len(a)] = a, 1
    return PackedActorBatch(packed_groups(sequences, policy_pad_id, max_length=prompt_limit + action_length),
                            np.array([len(p) for p in prompts], np.int32).reshape(groups, per),
                            Tokens(ids.reshape(groups, per, -1), mask.reshape(groups, per, -1)),
                            packed_groups(critic, critic_pad_id, max_length=max_length))
