"""The precision policy: config.model.matmul_precision reaches every jitted program, and
model.dtype "auto" picks bfloat16 on accelerators only."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest

from archer_jax.config import validate
from archer_jax import acting
from archer_jax.agents import chai
from archer_jax.learners.batches import BCBatch
from archer_jax.learners.packed_batches import PackedActorBatch, PackedCriticBatch, PackedTokens
from archer_jax.models.tokenizer import Tokens
from archer_jax.runtime import precision
from archer_jax.runtime import sharding as shd
from archer_jax.sampling import SamplingParams
from archer_jax.train import build_agent
from tests.run.test_train_app import micro


def dot_precisions(lowered) -> list[str]:
    """The precision of every dot_general in a lowered program (StableHLO text)."""
    text = lowered.as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert dots, "the program has no matrix product"
    return [re.search(r"precision = \[(\w+), \w+\]", line).group(1) if "precision" in line else "DEFAULT"
            for line in dots]


def packed_batch(groups, rows, length):
    """An abstract packed critic batch: ``rows`` transitions a group, one sequence a row."""
    ids = jax.ShapeDtypeStruct((groups, 3 * rows, length), jnp.int32)

    def packed(sequences):
        return PackedTokens(ids, ids, ids, jax.ShapeDtypeStruct((groups, sequences, 2), jnp.int32))

    scalars = jax.ShapeDtypeStruct((groups, rows), jnp.float32)
    return PackedCriticBatch(packed(2 * rows), packed(3 * rows), scalars, scalars)


def packed_actor_batch(groups, rows, length):
    """An abstract packed actor batch: ``rows`` transitions a group, one sequence a row."""
    def spec(*shape):
        return jax.ShapeDtypeStruct((groups, *shape), jnp.int32)

    policy = PackedTokens(spec(rows, 2 * length), spec(rows, 2 * length), spec(rows, 2 * length), spec(rows, 2))
    critic = PackedTokens(spec(2 * rows, length), spec(2 * rows, length), spec(2 * rows, length), spec(2 * rows, 2))
    return PackedActorBatch(policy, spec(rows), Tokens(spec(rows, length), spec(rows, length)), critic)


def token_spec(*shape):
    spec = jax.ShapeDtypeStruct(shape, jnp.int32)
    return Tokens(spec, spec)


@pytest.fixture(scope="module", params=["high", "highest"])
def programs(request, tmp_path_factory):
    """Every program one ArCHer iteration runs, built through the config, lowered."""
    c = micro()
    c.model.matmul_precision = request.param
    agent = build_agent(validate(c), tmp_path_factory.mktemp(f"precision_{request.param}"))
    run = agent.parts
    try:
        states = agent.init_states()
        sampling = SamplingParams(**c.sampling)
        prefill, decode = run.acting.sampler.decoder.lower(sampling, rows=8, prompt_length=16)
        steps = dict(critic_step=agent.critic_step, actor_step=agent.actor_step,
                     bc_step=agent.sft_step(c.sft.lr)[0])
        obs, act = token_spec(8, 16), token_spec(8, 16)
        groups = shd.batch_size_multiple(run.networks.mesh)  # the packed critic batch's groups: one a device
        lowered = dict(
            prefill=prefill,
            decode=decode,
            critic_step=steps["critic_step"].lower(states.critic, packed_batch(groups, 8 // groups, 16)),
            actor_step=steps["actor_step"].lower(states.actor, states.critic.params,  # packed, as a run's
                                                 packed_actor_batch(groups, 8 // groups, 16)),
            bc_step=steps["bc_step"].lower(states.actor, BCBatch(obs, act)),
            chai_scores=chai._q_values.lower(run.networks.critic_graphdef, states.critic.target, token_spec(8, 16),
                                                token_spec(16, 16), 2, run.acting.sampler.matmul_precision),
        )
        yield request.param, lowered
    finally:
        run.close()


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
@pytest.mark.parametrize("name", ["prefill", "decode", "critic_step", "actor_step", "bc_step", "chai_scores"])
def test_the_policy_reaches_every_program(programs, name):
    setting, lowered = programs
    assert set(dot_precisions(lowered[name])) == {setting.upper()}


def test_without_a_policy_programs_keep_the_ambient_setting():
    f = jax.jit(precision.traced_with(lambda a, b: a @ b, None))
    x = jnp.ones((2, 2))
    assert dot_precisions(f.lower(x, x)) == ["DEFAULT"]
    with jax.default_matmul_precision("highest"):
        assert dot_precisions(jax.jit(precision.traced_with(lambda a, b: a @ b, None)).lower(x, x)) == ["HIGHEST"]
        # An explicit setting wins over the ambient one.
        assert dot_precisions(jax.jit(precision.traced_with(lambda a, b: a @ b, "high")).lower(x, x)) == ["HIGH"]
    with pytest.raises(ValueError, match="matmul_precision must be one of default, high, highest, got 'tf32'"):
        precision.traced_with(lambda: None, "tf32")


def test_auto_dtype_is_bfloat16_on_accelerators_only():
    assert precision.compute_dtype("auto", "cpu") == jnp.float32
    assert precision.compute_dtype("auto", "gpu") == jnp.bfloat16
    assert precision.compute_dtype("auto", "tpu") == jnp.bfloat16
    assert precision.compute_dtype("float32", "tpu") == jnp.float32
    assert precision.compute_dtype("bfloat16", "cpu") == jnp.bfloat16


def test_parity_tests_run_at_highest_and_the_others_at_the_default(request):
    assert request.node.get_closest_marker("parity") is None
    assert jax.config.jax_default_matmul_precision is None
    x = jnp.ones((2, 2))
    assert dot_precisions(jax.jit(lambda a, b: a @ b).lower(x, x)) == ["DEFAULT"]
