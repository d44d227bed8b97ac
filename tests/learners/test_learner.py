"""The jitted, sharded steps: mesh invariance, isolation of the networks, averaging, clipping, NaN."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from archer_jax import learners
from archer_jax.agents.steps import Steps
from archer_jax.learners import archer, train_state
from archer_jax.runtime import sharding
from tests.learners.conftest import actor_batch, critic_batch, make_modules

CONFIG = learners.LearnerConfig(critic_lr=1e-4, actor_lr=1e-4)


def as_numpy(tree):
    return jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get(tree))


def max_abs_err(a, b) -> float:
    return max(jax.tree.leaves(jax.tree.map(lambda x, y: np.abs(x - y).max(), a, b)))


def max_rel_err(a, b) -> float:
    """max |a - b| over all leaves / max |b| over all leaves: error relative to the parameters' scale
    (per leaf it is ill-posed: GPT-2's key biases have zero gradient and stay ~0)."""
    return max_abs_err(a, b) / max(max(np.abs(x).max() for x in jax.tree.leaves(b)), 1e-12)


def run_steps(tiny_dirs, tokenizers, mesh=None, config=CONFIG):
    actor, critic = make_modules(tiny_dirs)
    learner = Steps(actor, critic, config, mesh=mesh)
    critic_state, critic_metrics = learner.critic_step(learner.init_critic(), critic_batch(tokenizers))
    actor_state, actor_metrics = learner.actor_step(learner.init_actor(), critic_state.params, actor_batch(tokenizers))
    return learner, critic_state, actor_state, critic_metrics, actor_metrics


# Adam moves each parameter by about the learning rate whatever its gradient's size, so rounding
# differences in near-zero gradients show up at a small fraction of the learning rate (5e-7 here),
# while the step moves parameters by the learning rate itself (1e-4 of their scale, ~1).
MESH_CONFIG = CONFIG


@pytest.fixture(scope="module")
def one_device(tiny_dirs, tokenizers):
    _, critic_state, actor_state, cm, am = run_steps(tiny_dirs, tokenizers, config=MESH_CONFIG)
    return as_numpy((critic_state.params, critic_state.target, actor_state.params)), as_numpy((cm, am))


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 2, 2)])  # data alone; data, fsdp and tensor together
def test_sharded_steps_match_one_device(shape, tiny_dirs, tokenizers, one_device):
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    mesh = sharding.make_mesh(*shape)
    learner, critic_state, actor_state, cm, am = run_steps(tiny_dirs, tokenizers, mesh, MESH_CONFIG)
    params, metrics = one_device
    ours = as_numpy((critic_state.params, critic_state.target, actor_state.params))
    assert max_rel_err(ours, params) < 1e-5
    initial = as_numpy((learner._critic_params, learner._critic_params, learner._actor_params))
    assert max_rel_err(ours, initial) > 5e-5  # the step did move them, well beyond the tolerance
    for name in ("loss", "grad_norm"):
        assert abs(as_numpy(cm)[name] - metrics[0][name]) <= 1e-5 * abs(metrics[0][name])
        assert abs(as_numpy(am)[name] - metrics[1][name]) <= 1e-5 * abs(metrics[1][name])
    # The parameters really live on the mesh, split where the mesh has fsdp / tensor axes.
    wte = actor_state.params["policy"]["wte"]["embedding"]
    word = critic_state.params["encoder"]["embeddings"]["word"]["embedding"]
    for array in (wte, word, critic_state.target["encoder"]["embeddings"]["word"]["embedding"]):
        assert len(array.sharding.device_set) == 8
        assert array.sharding.is_fully_replicated == (shape[1] == shape[2] == 1)
    mu = jax.tree.leaves(actor_state.opt_state)
    assert any(len(x.sharding.device_set) == 8 and not x.sharding.is_fully_replicated for x in mu) == (shape != (8, 1, 1))


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_a_replicated_critic_beside_a_sharded_policy_steps_as_on_one_device(tiny_dirs, tokenizers, one_device):
    """critic_rules=REPLICATED_RULES: on an FSDP mesh the policy is split, the critic whole on
    every device; the steps compute what one device does."""
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    actor, critic = make_modules(tiny_dirs)
    learner = Steps(actor, critic, MESH_CONFIG, mesh=sharding.make_mesh(1, 8, 1),
                               critic_rules=sharding.REPLICATED_RULES)
    critic_state, _ = learner.critic_step(learner.init_critic(), critic_batch(tokenizers))
    actor_state, _ = learner.actor_step(learner.init_actor(), critic_state.params, actor_batch(tokenizers))
    assert max_rel_err(as_numpy((critic_state.params, critic_state.target, actor_state.params)), one_device[0]) < 1e-5
    assert all(x.sharding.is_fully_replicated for x in jax.tree.leaves((critic_state.params, critic_state.opt_state)))
    wte = actor_state.params["policy"]["wte"]["embedding"]
    assert not wte.sharding.is_fully_replicated and len(wte.sharding.device_set) == 8


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_each_step_changes_only_its_own_network(tiny_dirs, tokenizers):
    actor, critic = make_modules(tiny_dirs)
    learner = Steps(actor, critic, CONFIG)
    critic_state, actor_state = learner.init_critic(), learner.init_actor()
    actor_before = as_numpy(actor_state.params)
    critic_state, _ = learner.critic_step(critic_state, critic_batch(tokenizers))
    critic_after = as_numpy((critic_state.params, critic_state.target))
    assert max_rel_err(as_numpy(actor_state.params), actor_before) == 0  # untouched by the critic step
    actor_state, _ = learner.actor_step(actor_state, critic_state.params, actor_batch(tokenizers))
    assert max_rel_err(as_numpy((critic_state.params, critic_state.target)), critic_after) == 0
    assert max_rel_err(as_numpy(actor_state.params), actor_before) > 0
    assert int(critic_state.step) == 1 and int(actor_state.step) == 1


def _sgd_critic_update(tiny_dirs, batch, tx, micro_batches=1):
    _, critic = make_modules(tiny_dirs)
    graphdef, params = train_state.split_params(critic)
    state = train_state.create(params, tx, with_target=True)
    step = jax.jit(lambda s, b: archer.critic_step(graphdef, tx, 0.95, 0.1, s, b, micro_batches=micro_batches))
    new, metrics = step(state, batch)
    return as_numpy(jax.tree.map(jnp.subtract, new.params, params)), metrics


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_gradients_are_averaged_over_micro_batches(tiny_dirs, tokenizers):
    """Two micro-batches of 8 give the update of one batch of 16 (a sum would double it)."""
    batch = critic_batch(tokenizers, n=16)
    sgd = optax.sgd(1.0)
    update_two, _ = _sgd_critic_update(tiny_dirs, batch, sgd, micro_batches=2)
    update_one, _ = _sgd_critic_update(tiny_dirs, batch, sgd, micro_batches=1)
    assert max_rel_err(update_two, update_one) < 1e-4


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_clipping_uses_this_networks_global_norm(tiny_dirs, tokenizers):
    batch = critic_batch(tokenizers)
    free, metrics = _sgd_critic_update(tiny_dirs, batch, optax.sgd(1.0))
    clip = 0.1
    clipped, _ = _sgd_critic_update(tiny_dirs, batch, optax.chain(optax.clip_by_global_norm(clip), optax.sgd(1.0)))
    norm = float(optax.tree.norm(free))  # SGD with rate 1: the update is the critic's own gradient
    assert norm > 2 * clip and abs(float(metrics["grad_norm"]) - norm) < 1e-4 * norm
    assert abs(float(optax.tree.norm(clipped)) - clip) < 1e-4 * clip
    assert max_rel_err(clipped, jax.tree.map(lambda g: g * clip / norm, free)) < 1e-4


def test_a_non_finite_loss_skips_the_step(tiny_dirs, tokenizers):
    actor, critic = make_modules(tiny_dirs)
    learner = Steps(actor, critic, CONFIG)
    state = learner.init_critic()
    before = as_numpy((state.params, state.target, state.opt_state))
    batch = critic_batch(tokenizers)
    batch = batch._replace(reward=batch.reward.copy())
    batch.reward[11] = np.nan
    state, metrics = learner.critic_step(state, batch)
    assert int(metrics["nonfinite"]) == 1 and int(state.skipped) == 1 and int(state.step) == 0
    assert max_rel_err(as_numpy((state.params, state.target, state.opt_state)), before) == 0
    state, metrics = learner.critic_step(state, critic_batch(tokenizers))  # a finite batch steps again
    assert int(metrics["nonfinite"]) == 0 and int(state.step) == 1 and int(state.skipped) == 1


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_metrics_and_the_token_baseline_variant(tiny_dirs, tokenizers):
    actor, critic = make_modules(tiny_dirs, token_baseline=True)
    config = learners.LearnerConfig(actor_loss="actor_token_baseline")
    learner = Steps(actor, critic, config)
    critic_state, cm = learner.critic_step(learner.init_critic(), critic_batch(tokenizers))
    actor_state, am = learner.actor_step(learner.init_actor(), critic_state.params, actor_batch(tokenizers))
    for key in ("loss", "q_loss", "v_loss", "grad_norm", "q1/mean", "q1/std", "v_target/max", "q_target/min"):
        assert np.isfinite(float(cm[key])), key
    for key in ("loss", "advantage/mean", "advantage/std", "action_logprob/mean", "baseline_loss", "grad_norm"):
        assert np.isfinite(float(am[key])), key
    assert float(am["action_logprob/max"]) < 0
    with pytest.raises(ValueError, match="needs an Actor built with token_baseline=True"):
        Steps(make_modules(tiny_dirs)[0], critic, config)


def test_bad_batches_give_clear_errors(tiny_dirs, tokenizers):
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    actor, critic = make_modules(tiny_dirs)
    learner = Steps(actor, critic, CONFIG, mesh=sharding.make_mesh(8, 1, 1))
    with pytest.raises(ValueError, match="batch size 6 is not a multiple of the mesh's batch axes"):
        learner.critic_step(learner.init_critic(), critic_batch(tokenizers, n=6))
