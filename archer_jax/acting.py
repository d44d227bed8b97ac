"""Acting, apart from learning: how an agent picks utterances with the parameters it is given.

    acting = Acting(sampler, pipeline, sampling=SamplingParams(...))
    acting.sample(policy_params, observations, key)             # a ~ π(·|s), or greedy
    acting.pi_actions(policy_params, replay_rows, key)          # fresh a_π for the critic's V-target
    acting.actor_batch(policy_params, sample, key)   # a_π with its tokens (each host its share)

Every call takes the parameters to act with, so the learner's state never hides in here. The
sampler (:mod:`archer_jax.sampling`) does the generation; this module turns its output into texts
and learner batches. An algorithm's own acting rule lives in its module (CHAI's choice among
samples: :mod:`archer_jax.agents.chai`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np
from flax import nnx

from archer_jax.input_pipeline import InputPipeline
from archer_jax.learners.batches import ActorBatch, actor_batch
from archer_jax.learners.packed_batches import PackedActorBatch, packed_actor_batch
from archer_jax.models.tokenizer import pad_rows, token_rows
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.distributed import allgather_objects, concat_gathered, host_share
from archer_jax.sampling import Generation, Sampler, SamplingParams
from archer_jax.sampling.phase_decodes import generate_steps


class ActorRows(NamedTuple):
    """An actor batch's rows before padding: what one host samples for its share of a step."""

    prompts: list[np.ndarray]  # policy ids of each observation, as the sampler truncated it
    actions: list[np.ndarray]  # the sampled a_π ids, stop token included
    critic_observations: list[np.ndarray]
    critic_actions: list[np.ndarray]  # a_π's text in critic ids

    def __add__(self, other: ActorRows) -> ActorRows:
        return ActorRows(*(a + b for a, b in zip(self, other)))


def sampled_actor_rows(
    sampler: Sampler,
    critic_tokenizer,
    policy_observations: Sequence[np.ndarray],
    critic_observations: Sequence[np.ndarray],
    key: jax.Array,
    sampling: SamplingParams,
    *,
    model_state: nnx.State | None = None,
    max_length: int = 512,
    row_ids: Sequence[int] | None = None,
    stop_token: bool = True,
    context: Sequence[str] | None = None,
) -> tuple[ActorRows, Generation]:
    """Draws a fresh ``a_π ~ π(·|s)`` for observations in policy and critic token rows (the
    replay buffer's). The policy rows are the sampler's own (its prompt encoding and the sampled
    ids, the stop token included unless ``stop_token`` is False), so the actor trains on exactly
    what was sampled; only the sampled texts are tokenized again, for the critic, each after its
    ``context`` text when given (the observation: ``model.critic_action="in_context"``). Returns
    ``(rows, generation)``."""
    generation = sampler.generate_rows(policy_observations, key, sampling, model_state=model_state, row_ids=row_ids)
    prompt = generation.prompt
    cut = [int(not stop_token and reason == "stop") for reason in generation.finish_reasons]
    rows = ActorRows(
        [ids[mask == 1] for ids, mask in zip(prompt.input_ids, prompt.attention_mask)],
        [tokens[:n - c] for tokens, n, c in zip(generation.tokens, generation.lengths, cut)],
        list(critic_observations),
        token_rows(critic_tokenizer, generation.texts if context is None else
                   [f"{o}{a}" for o, a in zip(context, generation.texts, strict=True)], max_length=max_length),
    )
    return rows, generation


def actor_batch_of(rows: ActorRows, sampler: Sampler, critic_tokenizer, sampling: SamplingParams, *,
                   max_length: int = 512, min_action_bucket: int = 16) -> ActorBatch:
    """The actor batch of ``rows``: prompts left-padded to the sampler's bucket, ``a_π`` right-padded
    to ``max_new_tokens``, the critic's rows to theirs."""
    limit = sampler.prompt_limit(sampling)
    observation = pad_rows(rows.prompts, sampler.pad_id, left=True, max_length=limit,
                           min_bucket=min(sampler.min_prompt_bucket, limit))
    new = sampling.max_new_tokens
    action = pad_rows(rows.actions, sampler.pad_id, left=False, max_length=new, length=new)
    return actor_batch(observation, action, critic_tokenizer, rows.critic_observations, rows.critic_actions,
                       max_length=max_length, min_action_bucket=min_action_bucket)


def packed_actor_rows(rows: ActorRows, sampler: Sampler, critic_tokenizer, sampling: SamplingParams, groups: int, *,
                      max_length: int = 512) -> PackedActorBatch:
    """:func:`actor_batch_of`'s rows packed several to a row, in ``groups`` runs of transitions
    (:func:`archer_jax.learners.packed_batches.packed_actor_batch`)."""
    return packed_actor_batch(sampler.pad_id, critic_tokenizer.pad_token_id, rows.prompts, rows.actions,
                              rows.critic_observations, rows.critic_actions, prompt_limit=sampler.prompt_limit(sampling),
                              action_length=sampling.max_new_tokens, groups=groups, max_length=max_length)


def sampled_actor_batch(
    sampler: Sampler,
    critic_tokenizer,
    policy_observations: Sequence[np.ndarray],
    critic_observations: Sequence[np.ndarray],
    key: jax.Array,
    sampling: SamplingParams,
    *,
    model_state: nnx.State | None = None,
    max_length: int = 512,
    min_action_bucket: int = 16,
) -> tuple[ActorBatch, Generation]:
    """:func:`sampled_actor_rows` laid out as an actor batch (:func:`actor_batch_of`)."""
    rows, generation = sampled_actor_rows(sampler, critic_tokenizer, policy_observations, critic_observations, key,
                                          sampling, model_state=model_state, max_length=max_length)
    batch = actor_batch_of(rows, sampler, critic_tokenizer, sampling, max_length=max_length,
                           min_action_bucket=min_action_bucket)
    return batch, generation


class Acting:
    """An agent's acting rules over one sampler, with the parameters passed to every call.

    With several processes (:mod:`archer_jax.runtime.distributed`) the sampler runs on this host's devices:
    parameters are brought to them (``localize``), rollouts act on this host's games (``rows``: their
    global numbers key the samples), and the ``a_π`` of a learner batch is drawn for this host's
    share of its rows and gathered, so every host builds the same global batch.
    """

    def __init__(
        self,
        sampler: Sampler,
        pipeline: InputPipeline,
        *,
        sampling: SamplingParams,
        score_stop_token: bool = True,
    ):
        self.sampler = sampler
        self.score_stop_token = score_stop_token
        self.pipeline = pipeline
        self.sampling = sampling
        self.greedy = dataclasses.replace(sampling, greedy=True)
        self._local: tuple = (None, None)

    def localize(self, params: nnx.State) -> nnx.State:
        """``params`` on the sampler's devices (the same object in a single process)."""
        if self._local[0] is not params:  # one copy per parameter state: critic steps reuse the policy's
            self._local = (params, shd.localize(params, self.sampler.mesh))
        return self._local[1]

    def sample(self, policy: nnx.State, observations: Sequence[str], key: jax.Array, *, greedy: bool = False,
               rows: Sequence[int] | None = None) -> list[str]:
        """One utterance per observation from the policy (sampled, or greedy); ``rows`` number the
        observations' dialogues (their samples' keys)."""
        sampling = self.greedy if greedy else self.sampling
        prompts = self.pipeline.policy_rows(observations)
        return self.sampler.generate_rows(prompts, key, sampling, model_state=self.localize(policy), row_ids=rows).texts

    def pi_actions(self, policy: nnx.State, policy_rows: Sequence[np.ndarray], key: jax.Array) -> list[str]:
        """A fresh ``a_π ~ π(·|s)`` per observation given in policy token rows (this host draws its
        share; every host gets all)."""
        share = host_share(len(policy_rows))
        texts = []
        if len(share):
            texts = self.sampler.generate_rows(policy_rows[share.start:share.stop], key, self.sampling,
                                               model_state=self.localize(policy), row_ids=share).texts
        return concat_gathered(texts)

    def pi_actions_steps(self, policy: nnx.State, policy_rows: Sequence[Sequence[np.ndarray]],
                         keys: Sequence[jax.Array]) -> list[list[str]]:
        """:meth:`pi_actions` for several steps at once (step ``s``: ``policy_rows[s]`` with
        ``keys[s]``), each row drawn as in its own step, in the few decodes that fit (this host
        draws its share of each step; one gather)."""
        shares = [host_share(len(rows)) for rows in policy_rows]
        generations = generate_steps(self.sampler, [rows[s.start:s.stop] for rows, s in zip(policy_rows, shares)],
                                     keys, shares, self.sampling, model_state=self.localize(policy))
        gathered = allgather_objects([g.texts for g in generations])
        return [[text for host in gathered for text in host[step]] for step in range(len(shares))]

    def localize_critic(self, params: nnx.State) -> nnx.State:
        return shd.localize(params, self.sampler.mesh)

    def actor_batch(self, policy: nnx.State, sample: dict, key: jax.Array, *,
                    groups: int | None = None) -> ActorBatch | PackedActorBatch:
        """The actor batch of a replay sample with a fresh ``a_π`` for each observation; with
        ``groups``, packed in that many runs of transitions (:func:`packed_actor_rows`)."""
        share = host_share(len(sample["policy_observation"]))
        rows = ActorRows([], [], [], [])
        if len(share):
            rows, _ = sampled_actor_rows(
                self.sampler, self.pipeline.critic_tokenizer, sample["policy_observation"][share.start:share.stop],
                sample["critic_observation"][share.start:share.stop], key, self.sampling,
                model_state=self.localize(policy), max_length=self.pipeline.max_critic_length, row_ids=share,
                stop_token=self.score_stop_token,
                context=sample["observation"][share.start:share.stop] if self.pipeline.critic_action_in_context else None,
            )
        rows = functools.reduce(ActorRows.__add__, allgather_objects(rows))
        if groups is not None:
            return packed_actor_rows(rows, self.sampler, self.pipeline.critic_tokenizer, self.sampling, groups,
                                     max_length=self.pipeline.max_critic_length)
        return actor_batch_of(rows, self.sampler, self.pipeline.critic_tokenizer, self.sampling,
                              max_length=self.pipeline.max_critic_length, min_action_bucket=self.pipeline.action_bucket)
