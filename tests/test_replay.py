"""The replay buffer: ring overwrite, uniform sampling, exact save and restore."""

import numpy as np
import pytest

from archer_jax.replay import ReplayBuffer


def transitions(start, count):
    return dict(
        observation=[f"Questions:\nobs {i} ünï 🐶\n" for i in range(start, start + count)],
        action=[f"Is it {i}?" for i in range(start, start + count)],
        reward=[-1.0 * (i % 3) for i in range(start, start + count)],
        terminal=[i % 5 == 0 for i in range(start, start + count)],
        action_ids=[np.arange(i % 7 + 1, dtype=np.int32) + i for i in range(start, start + count)],
    )


def test_ring_overwrites_the_oldest():
    buffer = ReplayBuffer(capacity=10)
    buffer.add(**transitions(0, 7))
    buffer.add(**transitions(7, 6))
    assert len(buffer) == 10 and buffer.added == 13
    stored = sorted(buffer.gather(np.arange(10))["action"], key=lambda a: int(a.split()[2][:-1]))
    assert stored == [f"Is it {i}?" for i in range(3, 13)]


def test_sampling_is_uniform():
    buffer = ReplayBuffer(capacity=20, seed=1)
    buffer.add(**transitions(0, 20))
    counts = np.bincount([int(a.split()[2][:-1]) for a in buffer.sample(20_000)["action"]], minlength=20)
    assert counts.min() > 850 and counts.max() < 1150  # 1000 expected each


def test_columns_keep_their_types():
    buffer = ReplayBuffer(capacity=8)
    buffer.add(**transitions(0, 8))
    batch = buffer.gather(np.array([3, 5]))
    assert batch["reward"].dtype == np.float32 and batch["terminal"].dtype == bool
    np.testing.assert_array_equal(batch["action_ids"][0], np.arange(4) + 3)
    assert batch["observation"][1] == "Questions:\nobs 5 ünï 🐶\n"


def test_save_and_restore_is_exact(tmp_path):
    buffer = ReplayBuffer(capacity=16, seed=7)
    buffer.add(**transitions(0, 20))
    buffer.sample(5)  # advance the generator
    buffer.save(tmp_path / "replay")
    restored = ReplayBuffer.restore(tmp_path / "replay")
    for source in (buffer, restored):
        source.add(**transitions(100, 3))
    a, b = buffer.sample(12), restored.sample(12)
    for name in a:
        if name == "action_ids":
            assert all(np.array_equal(x, y) for x, y in zip(a[name], b[name]))
        elif isinstance(a[name], np.ndarray):
            np.testing.assert_array_equal(a[name], b[name])
        else:
            assert a[name] == b[name]
    assert (restored.size, restored.next, restored.added) == (buffer.size, buffer.next, buffer.added)


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        ReplayBuffer(0)
    buffer = ReplayBuffer(4)
    with pytest.raises(ValueError, match="cannot sample from an empty replay buffer"):
        buffer.sample(1)
    buffer.add(**transitions(0, 2))
    with pytest.raises(ValueError, match="differ from the buffer's"):
        buffer.add(observation=["x"], action=["y"])
    with pytest.raises(ValueError, match="different lengths"):
        buffer.add(**(transitions(0, 2) | {"reward": [0.0]}))
    with pytest.raises(FileNotFoundError, match="no replay buffer in"):
        ReplayBuffer.restore(tmp_path / "missing")
