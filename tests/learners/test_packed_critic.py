"""The packed critic step against the padded one: the same loss, values and gradients.

At "highest" precision (tests/conftest.py). Gradients are read through the step itself, with
plain SGD of rate 1 as its optimizer (the update is then minus the gradient), on transitions of
varied lengths packed in one group and in two (the groups a two-device batch axis takes, and the
micro-batches they allow)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from archer_jax.agents.steps import Steps
from archer_jax.errors import TrainingError
from archer_jax.learners import archer, step_program, train_state
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.batches import critic_batch
from archer_jax.learners.packed_batches import group_count, packed_critic_batch, row_bucket
from tests.learners.conftest import make_modules
from tests.learners.test_learner import as_numpy, max_abs_err

GAMMA, TAU, N = 0.95, 0.1, 8


@pytest.fixture(scope="module")
def setup(tiny_dirs, tokenizers):
    critic = make_modules(tiny_dirs)[1]
    graphdef, params = nnx.split(critic)
    rng = np.random.default_rng(3)
    tokenizer = tokenizers[1]

    def rows(low, high):  # critic rows as the replay keeps them: <s> ... </s>
        return [np.array([0, *rng.integers(5, 300, n), 2], np.int32) for n in rng.integers(low, high, N)]

    obs, act, next_obs, pi = rows(10, 60), rows(1, 12), rows(20, 70), rows(1, 12)
    reward, terminal = rng.normal(size=N).astype(np.float32), (rng.random(N) < 0.3).astype(np.float32)
    padded = critic_batch(tokenizer, obs, act, next_obs, pi, reward, terminal, max_length=128)
    packed = {g: packed_critic_batch(tokenizer, obs, act, next_obs, pi, reward, terminal, groups=g, max_length=128)
              for g in (1, 2)}
    # A target that differs from the online critic, so the TD and V targets are not the online values.
    target = jax.tree.map(lambda p: p * 0.9 + 0.01, params)
    return graphdef, params, target, padded, packed


def _step(step, graphdef, params, target, batch, micro_batches=1):
    tx = optax.sgd(1.0)
    state = train_state.TrainState(params, tx.init(params), target, np.zeros((), np.int32), np.zeros((), np.int32))
    fn = jax.jit(functools.partial(step, graphdef, tx, GAMMA, TAU, micro_batches=micro_batches))
    new, metrics = fn(state, batch)
    grads = jax.tree.map(lambda a, b: np.asarray(a, np.float64) - np.asarray(b, np.float64), params, new.params)
    return grads, as_numpy(metrics)


def test_packed_batches_hold_every_sequence_in_fewer_rows(setup):
    *_, padded, packed = setup
    for groups, batch in packed.items():
        assert batch.online.ids.shape[0] == batch.target.ids.shape[0] == groups
        assert batch.online.starts.shape[1] == 2 * N // groups and batch.target.starts.shape[1] == 3 * N // groups
        tokens = int((batch.online.segments > 0).sum() + (batch.target.segments > 0).sum())
        padded_tokens = sum(int(t.mask.sum()) for t in (padded.observation, padded.action, padded.observation,
                                                       padded.next_observation, padded.pi_action))
        assert tokens == padded_tokens  # every token once, in its own sequence
    one = packed[1]
    assert one.online.ids.shape[1] * one.online.ids.shape[2] < 2 * N * padded.observation.ids.shape[1]
    assert [row_bucket(n) for n in (1, 4, 5, 7, 9, 13, 17, 33, 64, 65, 100, 129)] == [1, 4, 6, 8, 12, 16, 24, 48, 64, 80, 112, 160]


def test_groups_are_one_per_device_and_micro_batch():
    assert group_count(256, 1) == 1  # "auto" on an accelerator: the whole step in one group a device
    assert group_count(256, 4) == 4
    assert group_count(256, 1, 8) == 32  # a fixed micro-batch of 8 transitions: each packs its own
    assert group_count(256, 2, "auto", limit=8) == 64  # a CPU's "auto": micro-batches of batch_size
    assert group_count(32, 8, 64) == 8  # a micro-batch larger than the step: the step


@pytest.mark.parametrize("groups,micro_batches", [(1, 1), pytest.param(2, 2, marks=pytest.mark.slow)])  # over 5 s
def test_the_packed_step_equals_the_padded_one(setup, groups, micro_batches):
    """Loss, every metric and every parameter's gradient (SGD at rate 1: minus the update) of the
    packed step equal the padded step's, to float32 rounding; and the gradients are not zero."""
    graphdef, params, target, padded, packed = setup
    want_grads, want = _step(archer.critic_step, graphdef, params, target, padded)
    got_grads, got = _step(archer.packed_critic_step, graphdef, params, target, packed[groups], micro_batches)
    scale = max(np.abs(g).max() for g in jax.tree.leaves(want_grads))
    assert scale > 1e-4
    assert max_abs_err(got_grads, want_grads) <= 2e-5 * scale
    assert set(got) == set(want)
    for name, value in want.items():
        assert abs(got[name] - value) <= 2e-5 * max(abs(value), 1.0), (name, got[name], value)


@pytest.mark.slow  # over 5 s on 2 cores (it compiles the step): the fast tier skips it
def test_a_packed_step_that_does_not_fit_says_how_to_cut_it(tiny_dirs, setup, monkeypatch):
    """On a GPU or TPU ("auto", the device's own limit) a packed critic step is one micro-batch a
    device: when that does not fit, the line names the keys that cut it."""
    monkeypatch.setattr(step_program, "device_free_bytes", lambda devices: 1)
    monkeypatch.setattr(step_program, "shares_host_memory", lambda devices: False)
    steps = Steps(*make_modules(tiny_dirs), LearnerConfig(micro_batch_size="auto"))
    with pytest.raises(TrainingError, match=r"^packed_critic_step: micro-batches of 1 groups \(packed rows \d+\+\d+ of "
                                            r"\d+ tokens\) need .* fix config.learner.micro_batch_size .* "
                                            r"config.learner.pack_critic=false, or use more devices"):
        steps.packed_critic_step(steps.init_critic(), setup[-1][1])
