"""CHAI (Verma et al. 2022), online: ArCHer's critic, and a frozen policy steered by it.

Acting: ``chai_samples`` utterances sampled from the frozen policy per state, the one with the
highest ``min(Q̄1, Q̄2)`` under the target critic is taken (:func:`chai_actions`, here: CHAI's
own rule, beside the shared acting of :mod:`archer_jax.acting`).
Learning: ArCHer's critic steps, whose ``a_π`` is CHAI's own choice. The policy never changes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax.agents import archer
from archer_jax.agents.agent import timed
from archer_jax.agents.programs import Program
from archer_jax.learners.selection import chai_select
from archer_jax.models.tokenizer import Tokens, encode, next_power_of_two
from archer_jax.runtime.config_keys import key
from archer_jax.runtime.distributed import concat_gathered, host_share
from archer_jax.runtime.precision import traced_with
from archer_jax.sampling import Generation, Sampler, SamplingParams
from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer


@dataclasses.dataclass(frozen=True)
class Config(archer.Config):
    """ArCHer's keys (its critic's), and the candidates per state."""

    agent: ClassVar[str] = "chai"

    chai_samples: int = key(5, "CHAI: candidate actions per state")

    def __post_init__(self):
        super().__post_init__()
        if self.chai_samples < 1:
            raise ValueError(f"chai_samples: must be > 0, got {self.chai_samples}")


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
    row_ids: Sequence[int] | None = None,
    prompts: Sequence[np.ndarray] | None = None,
    action_in_context: bool = False,
) -> ChaiChoice:
    """For each observation, ``k`` samples from the (frozen) policy scored by the target critic's
    ``min(Q̄1, Q̄2)``; the highest-scoring one is chosen. The prompt is run through the policy
    once per observation (the sampler's fan-out) and encoded once by the critic. ``prompts``: the
    policy's prompts in token rows (default: the observations themselves); ``action_in_context``:
    the critic reads each candidate after its observation (``model.critic_action="in_context"``)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if prompts is None:
        generation = sampler.generate(observations, key, sampling, model_state=model_state, samples=k, row_ids=row_ids)
    else:
        generation = sampler.generate_rows(prompts, key, sampling, model_state=model_state, samples=k, row_ids=row_ids)
    rows = next_power_of_two(len(observations))
    obs = _pad_batch(encode(critic_tokenizer, observations, max_length=max_length), rows)
    texts = generation.texts
    if action_in_context:  # the samples are observation-major, k per observation
        texts = [observations[i // k] + text for i, text in enumerate(texts)]
    act = _pad_batch(encode(critic_tokenizer, texts, max_length=max_length), rows * k)
    batch = len(observations) * k
    scores = _q_values(critic_graphdef, target_params, obs, act, k, sampler.matmul_precision)
    q1, q2 = (jnp.reshape(q[:batch], (len(observations), k)) for q in scores)
    index = np.asarray(chai_select(q1, q2))
    texts = [generation.texts[i * k + j] for i, j in enumerate(index)]
    return ChaiChoice(texts, index, np.asarray(jnp.minimum(q1, q2)), generation)


class CHAI(archer.ArCHer):
    """ArCHer's critic steps with CHAI's choices as ``a_π``; the policy is frozen."""

    name = "chai"
    pi_reads_critic = True  # its a_π is the target critic's choice, which each critic step moves
    Config = Config

    @classmethod
    def actor_waits_for_warmup(cls, config: Config) -> bool:
        """CHAI's policy is frozen: no actor step waits."""
        return False

    def act(self, states: States, observations: Sequence[str], key: jax.Array, greedy: bool = False,
            rows: Sequence[int] | None = None) -> list[str]:
        """CHAI's choice among samples (the same rule in evaluation: ``greedy`` is not used)."""
        return self.choose(states, observations, key, rows=rows).texts

    def choose(self, states: States, observations: Sequence[str], key: jax.Array,
               rows: Sequence[int] | None = None) -> ChaiChoice:
        """The best of ``chai_samples`` samples of the policy by the target critic, per observation."""
        acting, pipeline = self.parts.acting, self.parts.pipeline
        return chai_actions(
            acting.sampler, self.networks.critic_graphdef, acting.localize_critic(states.critic.target),
            pipeline.critic_tokenizer, observations, key, acting.sampling, k=self.config.chai_samples,
            model_state=acting.localize(self.policy(states)), max_length=pipeline.max_critic_length, row_ids=rows,
            prompts=pipeline.policy_rows(observations), action_in_context=pipeline.critic_action_in_context)

    def pi_actions(self, states: States, sample: dict, key: jax.Array) -> list[str]:
        """CHAI's ``a_π`` for the critic's V-target: its own choice for each replayed observation
        (this host's share of the batch, gathered)."""
        observations = sample["observation"]
        share = host_share(len(observations))
        texts = []
        if len(share):
            texts = self.choose(states, list(observations[share.start:share.stop]), key, rows=share).texts
        return concat_gathered(texts)

    def programs(self, iterations: int) -> list[Program]:
        """ArCHer's critic step alone: CHAI trains no actor."""
        return [archer.critic_program(self)]

    def learn(self, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
        """``critic_steps`` critic steps; the policy is frozen."""
        states, seconds = timed(self.critic_updates, states, replay, iteration)
        return states, {"critic": seconds, "actor": 0.0}
