"""What an agent's iteration runs, as the agent declares it: each learner program (its compiled
step, its abstract inputs and its calls per iteration) and how many a_π decodes it samples.

    for program in agent.programs(iterations):
        args = program.inputs(shapes, rows)          # abstract arrays at the run's longest buckets
        compiled = program.step.compile(*args)       # what the plan measures
        program.per_iteration                        # critic_steps, actor steps after the warm-up, ...

``python -m archer_jax.plan`` reads nothing else of an agent's steps: a new algorithm with a step
of a new name declares it in :meth:`Agent.programs <archer_jax.agents.agent.Agent.programs>` and
is planned with no other file touched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from archer_jax.learners.batches import ActorBatch, BCBatch, CriticBatch
from archer_jax.learners.networks import Networks
from archer_jax.learners.packed_batches import PackedActorBatch, PackedCriticBatch, PackedTokens, row_bucket
from archer_jax.learners.step_program import StepProgram
from archer_jax.models.tokenizer import Tokens


@dataclasses.dataclass(frozen=True)
class InputShapes:
    """What a step's abstract inputs are sized and placed by: the run's networks (states, batch
    shardings) and its longest token buckets (prompt, action, critic input, critic action)."""

    networks: Networks
    prompt: int
    action: int
    critic: int
    critic_action: int

    def tokens(self, rows: int, length: int) -> Tokens:
        """Abstract token rows (ids and mask) of ``length``, sharded over the batch."""
        leaf = jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=self.networks.batch_sharding(2))
        return Tokens(leaf, leaf)

    def vector(self, rows: int, *shape: int) -> jax.ShapeDtypeStruct:
        """An abstract float32 ``[rows, *shape]`` batch array (a reward, a per-token advantage)."""
        return jax.ShapeDtypeStruct((rows, *shape), jnp.float32, sharding=self.networks.batch_sharding(1 + len(shape)))

    def critic_batch(self, rows: int) -> CriticBatch:
        crit, act = self.tokens(rows, self.critic), self.tokens(rows, self.critic_action)
        return CriticBatch(crit, act, crit, act, self.vector(rows), self.vector(rows))

    def packed_critic_batch(self, rows: int, groups: int) -> PackedCriticBatch:
        """A packed critic batch at the longest buckets (``rows`` transitions in ``groups`` over the
        mesh's batch axes): each observation a row of its own, the actions packed at their bucket."""
        per = rows // groups
        actions = -(-per * self.critic_action // self.critic)  # rows that a group's actions fill

        def packed(observations: int, filled: int) -> PackedTokens:
            leaf = jax.ShapeDtypeStruct((groups, row_bucket(filled), self.critic), jnp.int32,
                                        sharding=self.networks.batch_sharding(3))
            starts = jax.ShapeDtypeStruct((groups, observations + per, 2), jnp.int32,
                                          sharding=self.networks.batch_sharding(3))
            return PackedTokens(leaf, leaf, leaf, starts)

        vector = jax.ShapeDtypeStruct((groups, per), jnp.float32, sharding=self.networks.batch_sharding(2))
        return PackedCriticBatch(packed(per, per + actions), packed(2 * per, 2 * per + actions), vector, vector)

    def packed_actor_batch(self, rows: int, groups: int) -> PackedActorBatch:
        """A packed actor batch at the longest buckets (``rows`` transitions in ``groups``): each
        observation + a_π a policy row of its own; the critic's as :meth:`packed_critic_batch`'s."""
        per = rows // groups
        actions = -(-per * self.critic_action // self.critic)

        def leaf(shape, dtype=jnp.int32):
            return jax.ShapeDtypeStruct(shape, dtype, sharding=self.networks.batch_sharding(len(shape)))

        length = self.prompt + self.action
        policy = PackedTokens(*(leaf((groups, row_bucket(per), length)),) * 3, leaf((groups, per, 2)))
        critic = PackedTokens(*(leaf((groups, row_bucket(per + actions), self.critic)),) * 3, leaf((groups, 2 * per, 2)))
        action = leaf((groups, per, self.action))
        return PackedActorBatch(policy, leaf((groups, per)), Tokens(action, action), critic)

    def actor_batch(self, rows: int) -> ActorBatch:
        return ActorBatch(self.tokens(rows, self.prompt), self.tokens(rows, self.action),
                          self.tokens(rows, self.critic), self.tokens(rows, self.critic_action))

    def bc_batch(self, rows: int) -> BCBatch:
        return BCBatch(self.tokens(rows, self.prompt), self.tokens(rows, self.action))


def input_shapes(parts) -> InputShapes:
    """The abstract inputs' sizes of a run's (or a plan's) parts: its networks and longest token buckets."""
    return InputShapes(parts.networks, parts.max_prompt_length, parts.action_length, parts.max_critic_length,
                       parts.critic_action_length)


@dataclasses.dataclass(frozen=True)
class Program:
    """One learner program of an agent's iteration: ``step`` compiled, ``inputs(shapes, rows)``
    its abstract arguments at ``rows`` transitions, ``per_iteration`` its calls per iteration
    (averaged over the run's iterations, warm-up included)."""

    name: str
    step: StepProgram
    inputs: Callable[[InputShapes, int], tuple]
    per_iteration: float


def after_warmup(steps: int, warmup_iter: int, iterations: int) -> float:
    """Calls per iteration, averaged over ``iterations``, of a step run ``steps`` times an
    iteration once ``warmup_iter`` iterations are done."""
    return steps * (iterations - min(warmup_iter, iterations)) / max(iterations, 1)
