"""CHAI's acting rule: sample k actions per state, act with the best by the target critic."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax.learners.batches import tokenize
from archer_jax.learners.critic import Tokens
from archer_jax.learners.selection import chai_select
from archer_jax.models.tokenizer import next_power_of_two
from archer_jax.sampling import Generation, Sampler, SamplingParams


class ChaiChoice(NamedTuple):
    texts: list[str]  # the chosen action per observation
    index: np.ndarray  # [batch] which of the k candidates
    values: np.ndarray  # [batch, k] min(Q̄1, Q̄2) of every candidate
    candidates: Generation  # all batch * k samples, observation-major


@functools.partial(jax.jit, static_argnums=(0, 4))
def _q_values(graphdef: nnx.GraphDef, params: nnx.State, observation: Tokens, action: Tokens, k: int):
    """``Q̄_i`` of ``k`` actions per observation (``action`` rows observation-major); each
    observation is encoded once, not once per candidate."""
    critic = nnx.merge(graphdef, params)
    state = jnp.repeat(critic.embed(observation), k, axis=0)
    return critic.q_values(state, critic.embed(action))


def _pad_rows(tokens: Tokens, rows: int) -> Tokens:
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
    params: SamplingParams,
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
    generation = sampler.generate(observations, key, params, model_state=model_state, samples=k)
    rows = next_power_of_two(len(observations))
    obs = _pad_rows(tokenize(critic_tokenizer, observations, max_length), rows)
    act = _pad_rows(tokenize(critic_tokenizer, generation.texts, max_length), rows * k)
    batch = len(observations) * k
    q1, q2 = (jnp.reshape(q[:batch], (len(observations), k)) for q in _q_values(critic_graphdef, target_params, obs, act, k))
    index = np.asarray(chai_select(q1, q2))
    texts = [generation.texts[i * k + j] for i, j in enumerate(index)]
    return ChaiChoice(texts, index, np.asarray(jnp.minimum(q1, q2)), generation)
