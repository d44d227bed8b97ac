"""Orbax checkpoints of a run: states, replay buffer and loop state round-trip; partial writes are ignored."""

import shutil

import numpy as np
import pytest
from flax import nnx

from archer_jax import models
from archer_jax.records.checkpoint import Checkpoints
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


def _saved(learner, tmp_path):
    actor, critic = learner.init_actor(), learner.init_critic()
    buffer = ReplayBuffer(4)
    buffer.add(x=[1.0])
    checkpoints = Checkpoints(tmp_path / "ck", keep=3)
    checkpoints.save(0, actor=actor, critic=critic, replay=buffer, loop={"iteration": 0})
    return checkpoints, actor, critic, buffer


def test_arrays_that_are_not_the_saved_ones_fail_the_restore_by_their_checksums(learner, tmp_path):
    """A bad copy: checkpoint 0's critic files replaced by another checkpoint's. They load
    without an error (as flipped bits in an uncompressed chunk do); the checksums catch it."""
    import jax

    checkpoints, actor, critic, buffer = _saved(learner, tmp_path)
    other = critic._replace(params=jax.tree.map(lambda x: x + 1, critic.params))
    checkpoints.save(1, actor=actor, critic=other, replay=buffer, loop={"iteration": 1})
    shutil.rmtree(tmp_path / "ck" / "0" / "critic")
    shutil.copytree(tmp_path / "ck" / "1" / "critic", tmp_path / "ck" / "0" / "critic")
    with pytest.raises(ValueError, match=r"^the critic's array \['params'\].* does not match the checksum saved with it"):
        checkpoints.restore(0, actor=actor, critic=critic)
    _, _, _, loop = checkpoints.restore(0, actor=actor, critic=None)  # the actor's arrays are intact
    assert loop == {"iteration": 0}  # the checksums are the checkpoint's, not the caller's


def test_a_checkpoint_without_room_is_refused_before_writing(learner, tmp_path, monkeypatch):
    from archer_jax.errors import CheckpointWriteError
    from archer_jax.records import checkpoint

    checkpoints, actor, critic, buffer = _saved(learner, tmp_path)
    newest = sum(p.stat().st_size for p in (tmp_path / "ck" / "0").rglob("*") if p.is_file())
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: type("Usage", (), {"free": newest // 2})())
    with pytest.raises(CheckpointWriteError, match=r"^checkpoint 1 needs about [\d.]+ MiB in .*/ck, but [\d.]+ MiB are free$"):
        checkpoints.save(1, actor=actor, critic=critic, replay=buffer, loop={"iteration": 1})
    assert checkpoints.all_steps() == [0] and sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["0"]


def test_a_failed_write_is_one_line_and_leaves_nothing(learner, tmp_path, monkeypatch, capfd):
    from archer_jax.errors import CheckpointWriteError

    checkpoints, actor, critic, buffer = _saved(learner, tmp_path)

    def fails(step, **kwargs):
        (tmp_path / "ck" / f"{step}.orbax-checkpoint-tmp" / "critic").mkdir(parents=True)
        raise ValueError("RESOURCE_EXHAUSTED: Error writing \"params\": No space left on device\nmore lines")

    monkeypatch.setattr(checkpoints.manager, "save", fails)
    with pytest.raises(CheckpointWriteError) as error:
        checkpoints.save(1, actor=actor, critic=critic, replay=buffer, loop={"iteration": 1})
    assert str(error.value) == (f"checkpoint 1 could not be written to {tmp_path / 'ck'} (ValueError: RESOURCE_EXHAUSTED: "
                                "Error writing \"params\": No space left on device)")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["0"]  # its partial directory is gone


def test_one_process_writes_each_replicated_array_whole_and_reads_orbaxs_replica_parallel_layout(learner, tmp_path,
                                                                                               monkeypatch):
    """A run in one process writes every array from one replica (orbax's replica-parallel writing
    slices each replicated array per device first: a dispatched op per slice, for nothing here),
    and still restores what orbax's default writes."""
    import jax
    import orbax.checkpoint as ocp

    if jax.device_count() < 2:
        pytest.skip("needs 2 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    actor = jax.device_put(learner.init_actor(), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    buffer = ReplayBuffer(2)
    buffer.add(x=[1.0])
    slices = []
    slice_in_dim = jax.lax.slice_in_dim
    monkeypatch.setattr(jax.lax, "slice_in_dim", lambda *a, **k: slices.append(1) or slice_in_dim(*a, **k))

    ours = Checkpoints(tmp_path / "ours")
    ours.save(1, actor=actor, critic=None, replay=buffer, loop={"iteration": 1})
    assert not slices  # each array written whole

    handler = ocp.type_handlers.get_type_handler(jax.Array)
    theirs = Checkpoints(tmp_path / "theirs")
    monkeypatch.setattr(handler, "_use_replica_parallel", True)  # orbax's default
    theirs.save(1, actor=actor, critic=None, replay=buffer, loop={"iteration": 1})
    assert slices  # replica-parallel: sliced per device
    monkeypatch.undo()
    for checkpoints in (ours, theirs):
        restored, *_ = checkpoints.restore(1, actor=actor, critic=None)
        assert _equal(restored, actor)
