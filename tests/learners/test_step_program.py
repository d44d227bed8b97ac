"""Steps compile from shapes alone: modules from ``nnx.eval_shape``, states and batches as
``jax.ShapeDtypeStruct``s with their shardings, no weights anywhere (how a program is compiled for
devices that hold none, such as a TPU topology's)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from archer_jax.agents import archer as archer_agent
from archer_jax.learners import Actor, DoubleCritic, LearnerConfig, Networks, train_state
from archer_jax.learners.batches import ActorBatch, CriticBatch
from archer_jax.learners.step_program import abstract
from archer_jax.models.gpt2.model import GPT2LMHeadModel
from archer_jax.models.roberta.model import RobertaModel
from archer_jax.models.tiny import tiny_config
from archer_jax.models.tokenizer import Tokens
from archer_jax.runtime import sharding


def _abstract_networks(mesh) -> Networks:
    def build():
        policy = GPT2LMHeadModel(tiny_config("gpt2", 256), rngs=nnx.Rngs(0))
        encoder = RobertaModel(tiny_config("roberta", 256), rngs=nnx.Rngs(0))
        return Actor(policy), DoubleCritic(encoder, rngs=nnx.Rngs(0))

    actor, critic = nnx.eval_shape(build)
    return Networks(actor, critic, mesh=mesh, micro_batch_size=8)


def _tokens(rows: int, length: int) -> Tokens:
    return Tokens(jax.ShapeDtypeStruct((rows, length), jnp.int32), jax.ShapeDtypeStruct((rows, length), jnp.int32))


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner programs): the fast tier skips it
def test_critic_and_actor_steps_compile_from_shapes_without_weights():
    mesh = sharding.make_mesh(-1, 1, 1)
    networks = _abstract_networks(mesh)
    params = jax.tree.leaves(networks.abstract_critic(train_state.optimizer(1e-4, 1.0)).params)
    assert params and all(isinstance(x, jax.ShapeDtypeStruct) for x in params)  # no array was made
    config = LearnerConfig(micro_batch_size=8, pack_critic=False)  # a padded critic batch takes micro-batches
    tx = train_state.optimizer(config.critic_lr, config.max_grad_norm)
    actor_tx = train_state.optimizer(config.actor_lr, config.max_grad_norm)
    rows, obs, act = 16, _tokens(16, 32), _tokens(16, 16)
    scalars = jax.ShapeDtypeStruct((rows,), jnp.float32)

    critic = archer_agent.critic_step(networks, tx, config)
    batch = abstract(CriticBatch(obs, act, obs, act, scalars, scalars), networks.critic_batch_shardings())
    compiled = critic.lower(networks.abstract_critic(tx), batch).compile()
    assert critic.layout(networks.abstract_critic(tx), batch).count == 2  # micro-batches of 8 (one per device each)
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    assert cost["flops"] > 0
    memory = compiled.memory_analysis()
    if memory is not None:  # the backend reports the program's buffers
        assert memory.argument_size_in_bytes > 0

    actor = archer_agent.actor_step(networks, actor_tx, tx, config)
    batch = abstract(ActorBatch(obs, act, obs, act), networks.actor_batch_shardings())
    state = networks.abstract_actor(actor_tx)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(state))
    actor.lower(state, networks.abstract_critic(tx).params, batch).compile()
