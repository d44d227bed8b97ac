"""Orbax checkpoints of a run: states, replay buffer and loop state round-trip; partial writes are ignored."""

import numpy as np
import pytest
from flax import nnx

from archer_jax import models
from archer_jax.run.checkpoint import Checkpoints
from archer_jax.learners import Actor, DoubleCritic
from archer_jax.replay import ReplayBuffer
from archer_jax.agents.steps import Steps


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    gpt2, roberta = models.build_tiny("gpt2", d / "g"), models.build_tiny("roberta", d / "r")
    return Steps(Actor(models.load_gpt2(gpt2)), DoubleCritic(models.load_roberta(roberta), rngs=nnx.Rngs(0)))


def _equal(a, b):
    import jax

    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_round_trip_and_latest_complete_step(learner, tmp_path):
    critic, actor = learner.init_critic(), learner.init_actor()
    buffer = ReplayBuffer(8, seed=3)
    buffer.add(observation=["a", "b", "c"], reward=[1.0, -1.0, 0.5], ids=[np.arange(3), np.arange(1), np.arange(2)])
    buffer.sample(2)  # move its generator
    checkpoints = Checkpoints(tmp_path / "ck", keep=2)
    assert checkpoints.latest() is None
    loop = {"iteration": 3, "history": [{"x": 1.5}]}
    checkpoints.save(3, actor=actor, critic=critic, replay=buffer, loop=loop)
    # A later step whose write never finished (orbax's temporary directory) is not a checkpoint.
    (tmp_path / "ck" / "4.orbax-checkpoint-tmp-123").mkdir()
    assert checkpoints.latest() == 3

    fresh_critic = learner.init_critic()
    a, c, b, restored_loop = Checkpoints(tmp_path / "ck").restore(3, actor=learner.init_actor(), critic=fresh_critic)
    assert restored_loop == loop
    assert _equal(a, actor) and _equal(c, critic) and c.target is not None
    assert int(c.step) == 0
    # The buffer continues exactly: same contents, same next draws.
    assert b.columns["observation"][:3] == ["a", "b", "c"]
    np.testing.assert_array_equal(b.sample(5)["reward"], buffer.sample(5)["reward"])


def test_keeps_the_newest_checkpoints(learner, tmp_path):
    actor = learner.init_actor()
    checkpoints = Checkpoints(tmp_path / "ck", keep=2)
    buffer = ReplayBuffer(2)
    buffer.add(x=[1.0])
    for step in (0, 1, 2):
        checkpoints.save(step, actor=actor, critic=None, replay=buffer, loop={"iteration": step})
    assert checkpoints.all_steps() == [1, 2]
    a, c, _, loop = checkpoints.restore(2, actor=actor, critic=None)
    assert c is None and loop == {"iteration": 2}
