"""The packed actor step against the padded one: the same loss, metrics and gradients.

At "highest" precision (tests/conftest.py). Gradients are read through the step itself, with
plain SGD of rate 1,000 as its optimizer (the update is then -1,000 times the gradient, well
above the float32 rounding of parameters near 1 such as the layer norms'), on actor rows of
varied lengths as the sampler gives them (prompts cut to the sampler's limit, a_π of up to
``max_new_tokens`` with a one-token one), laid out as a run lays them out: padded
(:func:`archer_jax.acting.actor_batch_of`) and packed (:func:`archer_jax.acting.packed_actor_rows`)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from archer_jax.learners import archer, train_state
from archer_jax.learners.batches import actor_batch
from archer_jax.learners.packed_batches import packed_actor_batch
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.models.tokenizer import pad_rows
from tests.learners.conftest import make_modules
from tests.learners.test_learner import max_abs_err

N, LIMIT, NEW = 8, 48, 12  # transitions, the sampler's prompt limit, max_new_tokens
RATE = 1e3


@pytest.fixture(scope="module")
def setup(tiny_dirs, tokenizers):
    actor, critic = make_modules(tiny_dirs, token_baseline=True)
    rng = np.random.default_rng(5)
    policy_pad, critic_pad = tokenizers[0].pad_token_id, tokenizers[1].pad_token_id
    prompts = [rng.integers(5, 300, n).astype(np.int32) for n in (60, 10, 33, 48, 7, 21, 40, 15)]  # one over LIMIT
    actions = [rng.integers(5, 300, n).astype(np.int32) for n in (12, 1, 5, 9, 12, 3, 7, 4)]
    critic_obs = [np.array([0, *rng.integers(5, 300, n), 2], np.int32) for n in rng.integers(10, 60, N)]
    critic_act = [np.array([0, *rng.integers(5, 300, n), 2], np.int32) for n in rng.integers(1, 12, N)]
    observation = pad_rows([p[-LIMIT:] for p in prompts], policy_pad, left=True, max_length=LIMIT)
    action = pad_rows(actions, policy_pad, left=False, max_length=NEW, length=NEW)
    padded = actor_batch(observation, action, tokenizers[1], critic_obs, critic_act, max_length=128)
    packed = {g: packed_actor_batch(policy_pad, critic_pad, prompts, actions, critic_obs, critic_act, prompt_limit=LIMIT,
                                    action_length=NEW, groups=g, max_length=128) for g in (1, 2)}
    return actor, critic, padded, packed


def _step(step, actor, critic, batch, loss, distribution, center, micro_batches=1):
    graphdef, params = nnx.split(actor)
    critic_graphdef, critic_params = nnx.split(critic)
    tx = optax.sgd(RATE)
    state = train_state.create(params, tx)
    fn = jax.jit(functools.partial(step, graphdef, critic_graphdef, tx, loss, micro_batches=micro_batches,
                                   distribution=distribution, center_advantage=center))
    new, metrics = fn(state, critic_params, batch)
    grads = jax.tree.map(lambda a, b: (np.asarray(a, np.float64) - np.asarray(b, np.float64)) / RATE, params, new.params)
    return grads, {k: float(v) for k, v in jax.device_get(metrics).items()}


def test_packed_actor_batches_hold_every_token_once(setup):
    *_, padded, packed = setup
    for groups, batch in packed.items():
        assert batch.policy.ids.shape[0] == batch.action.ids.shape[0] == batch.critic.ids.shape[0] == groups
        policy_tokens = int((batch.policy.segments > 0).sum())
        assert policy_tokens == int(padded.observation.mask.sum() + padded.action.mask.sum())
        assert int((batch.critic.segments > 0).sum()) == int(padded.critic_observation.mask.sum()
                                                              + padded.critic_action.mask.sum())
        np.testing.assert_array_equal(batch.action.ids.reshape(N, NEW), padded.action.ids)
    one = packed[1].policy.ids
    assert one.shape[0] * one.shape[1] < N * (padded.observation.ids.shape[1] + NEW)  # fewer positions than padded


@pytest.mark.parametrize("groups,micro_batches,loss,distribution,center", [
    (1, 1, "actor_token_baseline", TokenDistribution(temperature=0.7, top_p=0.9), True),
    pytest.param(2, 2, "actor_pg", TokenDistribution(), False, marks=pytest.mark.slow),  # over 5 s on 2 cores
])
def test_the_packed_actor_step_equals_the_padded_one(setup, groups, micro_batches, loss, distribution, center):
    """Loss, every metric and every parameter's gradient of the packed step equal the padded
    step's, to float32 rounding; and the gradients are not zero."""
    actor, critic, padded, packed = setup
    want_grads, want = _step(archer.actor_step, actor, critic, padded, loss, distribution, center, micro_batches)
    got_grads, got = _step(archer.packed_actor_step, actor, critic, packed[groups], loss, distribution, center,
                           micro_batches)
    scale = max(np.abs(g).max() for g in jax.tree.leaves(want_grads))
    assert scale > 1e-4
    if center:  # the centred gradient is a sum of terms about 100x larger that nearly cancel: its
        # rounding is relative to theirs (the uncentred step's gradient), whatever the layout
        scale = max(np.abs(g).max() for g in jax.tree.leaves(
            _step(archer.actor_step, actor, critic, padded, loss, distribution, False)[0]))
    assert max_abs_err(got_grads, want_grads) <= 1e-5 * scale
    assert set(got) == set(want)
    for name, value in want.items():
        assert abs(got[name] - value) <= 1e-5 * max(abs(value), 1.0), (name, got[name], value)


def test_bad_actor_rows_are_named(setup, tokenizers):
    with pytest.raises(ValueError, match="do not cut into 3 equal groups"):
        packed_actor_batch(0, 1, [np.ones(3, np.int32)] * 4, [np.ones(2, np.int32)] * 4, [np.ones(3, np.int32)] * 4,
                           [np.ones(3, np.int32)] * 4, prompt_limit=8, action_length=4, groups=3)
    with pytest.raises(ValueError, match="more than action_length=2"):
        packed_actor_batch(0, 1, [np.ones(3, np.int32)], [np.ones(3, np.int32)], [np.ones(3, np.int32)],
                           [np.ones(3, np.int32)], prompt_limit=8, action_length=2)
