"""Acting, apart from learning: how an agent picks utterances with the parameters it is given.

    acting = Acting(sampler, pipeline, sampling=SamplingParams(...), critic_graphdef=graphdef)
    acting.sample(policy_params, observations, key)             # a ~ π(·|s), or greedy
    acting.pi_actions(policy_params, replay_rows, key)          # fresh a_π for the critic's V-target
    acting.actor_batch(policy_params, sample, key)   # a_π with its tokens
    acting.chai(policy_params, target_params, observations, key)           # CHAI's choice

Every call takes the parameters to act with (the policy's, and the target critic's for CHAI), so
the learner's state never hides in here. The sampler (:mod:`archer_jax.sampling`) does the
generation; this module turns its output into texts, learner batches and CHAI's choices.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax.input_pipeline import InputPipeline
from archer_jax.learners.batches import ActorBatch, actor_batch, right_padded
from archer_jax.learners.selection import chai_select
from archer_jax.models.tokenizer import Tokens, encode, next_power_of_two, token_rows
from archer_jax.precision import traced_with
from archer_jax.sampling import Generation, Sampler, SamplingParams


class ChaiChoice(NamedTuple):
    texts: list[str]  # the chosen action per observation
    index: np.ndarray  # [batch] which of the k candidates
    values: np.ndarray  # [batch, k] min(Q̄1, Q̄2) of every candidate
    candidates: Generation  # all batch * k samples, observation-major


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def _q_values(graphdef: nnx.GraphDef, critic_params: nnx.State, observation: Tokens, action: Tokens, k: int,
              matmul_precision: str | None):
    """``Q̄_i`` of ``k`` actions per observation (``action`` rows observation-major); each
    observation is encoded once, not once per candidate."""

    def score():
        critic = nnx.merge(graphdef, critic_params)
        state = jnp.repeat(critic.embed(observation), k, axis=0)
        return critic.q_values(state, critic.embed(action))

    return traced_with(score, matmul_precision)()


def _pad_batch(tokens: Tokens, rows: int) -> Tokens:
    """Pads the batch to ``rows`` (a power of two, so the scoring compiles for few shapes)."""
    extra = rows - tokens.ids.shape[0]
    return Tokens(*(np.pad(x, ((0, extra), (0, 0))) for x in tokens))


def chai_actions(
    sampler: Sampler,
    critic_graphdef: nnx.GraphDef,
    target_params: nnx.State,
    critic_tokenizer,
    observations: Sequence[str],
    key: jax.Array,
    sampling: SamplingParams,
    *,
    k: int = 5,
    model_state: nnx.State | None = None,
    max_length: int = 512,
) -> ChaiChoice:
    """For each observation, ``k`` samples from the (frozen) policy scored by the target critic's
    ``min(Q̄1, Q̄2)``; the highest-scoring one is chosen. The prompt is run through the policy
    once per observation (the sampler's fan-out) and encoded once by the critic."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    generation = sampler.generate(observations, key, sampling, model_state=model_state, samples=k)
    rows = next_power_of_two(len(observations))
    obs = _pad_batch(encode(critic_tokenizer, observations, max_length=max_length), rows)
    act = _pad_batch(encode(critic_tokenizer, generation.texts, max_length=max_length), rows * k)
    batch = len(observations) * k
    scores = _q_values(critic_graphdef, target_params, obs, act, k, sampler.matmul_precision)
    q1, q2 = (jnp.reshape(q[:batch], (len(observations), k)) for q in scores)
    index = np.asarray(chai_select(q1, q2))
    texts = [generation.texts[i * k + j] for i, j in enumerate(index)]
    return ChaiChoice(texts, index, np.asarray(jnp.minimum(q1, q2)), generation)


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
    """Draws a fresh ``a_π ~ π(·|s)`` for observations in policy and critic token rows (the
    replay buffer's) and builds the actor batch from it.

    The policy tokens are the sampler's own (its prompt encoding and the sampled ids, stop token
    included), so the actor trains on exactly what was sampled; only the sampled texts are
    tokenized again, for the critic. Returns ``(batch, generation)``.
    """
    generation = sampler.generate_rows(policy_observations, key, sampling, model_state=model_state)
    batch = actor_batch(
        generation.prompt,
        right_padded(generation.tokens, generation.lengths, sampler.pad_id),
        critic_tokenizer,
        critic_observations,
        token_rows(critic_tokenizer, generation.texts, max_length=max_length),
        max_length=max_length,
        min_action_bucket=min_action_bucket,
    )
    return batch, generation


class Acting:
    """An agent's acting rules over one sampler, with the parameters passed to every call."""

    def __init__(
        self,
        sampler: Sampler,
        pipeline: InputPipeline,
        *,
        sampling: SamplingParams,
        critic_graphdef: nnx.GraphDef | None = None,
        chai_samples: int = 5,
    ):
        self.sampler = sampler
        self.pipeline = pipeline
        self.sampling = sampling
        self.greedy = dataclasses.replace(sampling, greedy=True)
        self.critic_graphdef = critic_graphdef
        self.chai_samples = chai_samples

    def sample(self, policy: nnx.State, observations: Sequence[str], key: jax.Array, *, greedy: bool = False) -> list[str]:
        """One utterance per observation from the policy (sampled, or greedy)."""
        sampling = self.greedy if greedy else self.sampling
        return self.sampler.generate(observations, key, sampling, model_state=policy).texts

    def pi_actions(self, policy: nnx.State, policy_rows: Sequence[np.ndarray], key: jax.Array) -> list[str]:
        """A fresh ``a_π ~ π(·|s)`` per observation given in policy token rows."""
        return self.sampler.generate_rows(policy_rows, key, self.sampling, model_state=policy).texts

    def chai(self, policy: nnx.State, target: nnx.State, observations: Sequence[str], key: jax.Array) -> ChaiChoice:
        """CHAI's choice: the best of ``chai_samples`` samples by the target critic (``target``)."""
        return chai_actions(
            self.sampler, self.critic_graphdef, target, self.pipeline.critic_tokenizer, observations, key,
            self.sampling, k=self.chai_samples, model_state=policy, max_length=self.pipeline.max_critic_length,
        )

    def actor_batch(self, policy: nnx.State, sample: dict, key: jax.Array) -> ActorBatch:
        """The actor batch of a replay sample with a fresh ``a_π`` for each observation."""
        batch, _ = sampled_actor_batch(
            self.sampler, self.pipeline.critic_tokenizer, sample["policy_observation"], sample["critic_observation"],
            key, self.sampling, model_state=policy,
            max_length=self.pipeline.max_critic_length, min_action_bucket=self.pipeline.action_bucket,
        )
        return batch
