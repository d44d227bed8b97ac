"""A LoRA policy in the learner: only the adapters train; the base weights stay frozen, shared and
out of the optimizer and the checkpoints."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from archer_jax import learners, models
from archer_jax.learners import batches, bc, train_state
from archer_jax.models import lora
from archer_jax.replay import ReplayBuffer
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.sampling import Sampler, SamplingParams
from archer_jax.agents.steps import Steps
from tests.learners.conftest import ACTIONS, OBSERVATIONS

CONFIG = learners.LearnerConfig(critic_lr=1e-3, actor_lr=1e-3)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return models.build_tiny("llama", tmp_path_factory.mktemp("tiny_llama"))


def lora_actor(directory):
    policy = models.load_causal_lm(directory)
    wrapped = lora.apply_lora(policy, lora.LoRAConfig(rank=4, alpha=8.0), rngs=nnx.Rngs(1))
    return learners.Actor(policy), wrapped


def bc_batch(directory):
    tokenizer = models.load_tokenizer(directory)
    observations = models.tokenizer.token_rows(tokenizer, OBSERVATIONS[:4] * 2, max_length=64)
    return batches.bc_batch(tokenizer, observations, models.tokenizer.action_rows(tokenizer, ACTIONS * 2))


def host(tree):
    return jax.tree.map(np.asarray, jax.device_get(tree))


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_only_the_adapters_train_and_the_base_stays_put(llama_dir):
    actor, wrapped = lora_actor(llama_dir)
    learner = Steps(actor, None, CONFIG)
    state = learner.init_actor()
    assert len(jax.tree.leaves(state.params)) == 2 * len(wrapped) == 16  # A and B of q/k/v/o in 2 layers
    assert state.frozen is not None and len(jax.tree.leaves(state.frozen)) > 20
    adam_moments = [x for x in jax.tree.leaves(state.opt_state) if x.ndim > 0]
    assert len(adam_moments) == 2 * len(jax.tree.leaves(state.params))  # mu and nu of the adapters only
    base_before, frozen_refs = host(state.frozen), state.frozen
    batch = bc_batch(llama_dir)

    # The step equals an independent one: value_and_grad of the same loss over the adapters only,
    # then the same clipped Adam (optax), outside the learner's programs.
    graphdef, params, frozen = train_state.split_trainable(lora_actor(llama_dir)[0])
    tx = train_state.optimizer(CONFIG.actor_lr, CONFIG.max_grad_norm)

    def loss(p):
        token_logprobs, _ = nnx.merge(graphdef, p, frozen)(batch.observation, batch.action)
        return bc.losses.bc_nll_loss(token_logprobs, batch.action.mask.astype(np.float32))

    grads, _ = jax.grad(loss, has_aux=True)(params)
    updates, _ = tx.update(grads, tx.init(params), params)
    expected = optax.apply_updates(params, updates)

    for _ in range(2):
        state, metrics = learner.bc_step(state, batch)
    assert int(metrics["skipped"]) == 0
    jax.tree.map(np.testing.assert_array_equal, host(state.frozen), base_before)  # unchanged ...
    assert all(not x.is_deleted() for x in jax.tree.leaves(frozen_refs))  # ... and never donated
    b = state.params["policy"]["layers"][0]["self_attn"]["query"]["lora_b"][...]
    assert np.abs(np.asarray(b)).max() > 0  # B left zero: the adapters moved

    one = Steps(lora_actor(llama_dir)[0], None, CONFIG)
    first, _ = one.bc_step(one.init_actor(), batch)
    for got, want in zip(jax.tree.leaves(host(first.params)), jax.tree.leaves(host(expected)), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_the_sampler_acts_with_adapters_and_base_together(llama_dir):
    actor, _ = lora_actor(llama_dir)
    learner = Steps(actor, None, CONFIG)
    state = learner.init_actor()
    for _ in range(3):
        state, _ = learner.bc_step(state, bc_batch(llama_dir))
    sampler = Sampler(actor.policy, models.load_tokenizer(llama_dir))
    params = SamplingParams(max_new_tokens=6, greedy=True)
    trained = sampler.generate(OBSERVATIONS[:4], jax.random.key(0), params, model_state=learner.policy_params(state))
    # The same adapters merged into the base weights give the same tokens (merged_copy is PEFT's merge).
    policy = nnx.merge(nnx.graphdef(actor.policy), learner.policy_params(state))
    merged = Sampler(lora.merged_copy(policy), models.load_tokenizer(llama_dir))
    np.testing.assert_array_equal(trained.tokens, merged.generate(OBSERVATIONS[:4], jax.random.key(0), params).tokens)


def test_checkpoints_hold_the_adapters_not_the_base(llama_dir, tmp_path):
    actor, _ = lora_actor(llama_dir)
    learner = Steps(actor, None, CONFIG)
    state, _ = learner.bc_step(learner.init_actor(), bc_batch(llama_dir))
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    checkpoints.save(1, actor=state, critic=None, replay=ReplayBuffer(8), loop={"iteration": 1})
    saved = sum(f.stat().st_size for f in (tmp_path / "checkpoints" / "1" / "actor").rglob("*") if f.is_file())
    base = sum(x.nbytes for x in jax.tree.leaves(host(state.frozen)))
    assert saved < base / 4  # the adapters and their Adam moments, not the 4x larger base
    fresh = Steps(lora_actor(llama_dir)[0], None, CONFIG).init_actor()
    restored, _, _, _ = checkpoints.restore(1, actor=fresh, critic=None)
    jax.tree.map(np.testing.assert_array_equal, host(restored.params), host(state.params))
    assert restored.frozen is fresh.frozen


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_lora_dropout_masks_the_adapters_input_afresh_each_step(llama_dir):
    """PEFT's lora_dropout in the training steps: the loss of a step differs from the deterministic
    loss, differs between steps of the same parameters, and is the same for the same step (resume)."""
    policy = models.load_causal_lm(llama_dir)
    lora.apply_lora(policy, lora.LoRAConfig(rank=4, alpha=8.0, dropout=0.5), rngs=nnx.Rngs(1))
    graphdef, params, frozen = train_state.split_trainable(learners.Actor(policy))
    params = jax.tree.map(lambda x: x + 0.05, params)  # B != 0, so the adapters' input matters
    batch = bc_batch(llama_dir)

    def loss(step):
        token_logprobs, _ = train_state.merged(graphdef, params, frozen, step)(batch.observation, batch.action)
        return float(bc.losses.bc_nll_loss(token_logprobs, batch.action.mask.astype(np.float32))[0])

    deterministic, first, second = loss(None), loss(np.int32(0)), loss(np.int32(1))
    assert len({round(x, 4) for x in (deterministic, first, second)}) == 3
    assert loss(np.int32(1)) == second
    learner = Steps(learners.Actor(policy), None, CONFIG)  # the learner runs it too
    state, metrics = learner.bc_step(learner.init_actor(), batch)
    assert int(metrics["skipped"]) == 0 and np.isfinite(float(metrics["loss"]))
