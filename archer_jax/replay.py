"""The host replay buffer: a ring of transitions with texts, numbers and token ids, saved exactly.

    buffer = ReplayBuffer(capacity=100_000, seed=0)
    buffer.add(observation=[...], action=[...], reward=[...], next_observation=[...], terminal=[...],
               observation_ids=[np.array([...]), ...])
    batch = buffer.sample(256)                # a dict of columns, uniformly drawn
    buffer.save(directory); ReplayBuffer.restore(directory)

Columns are declared by the first ``add``: strings (texts), numbers (rewards, flags) or
variable-length integer arrays (token ids, kept so that batches need no re-tokenization). When
full, the oldest transitions are overwritten. Sampling uses the buffer's own NumPy generator,
whose state is saved with the data, so a restored buffer draws exactly what the original would
have drawn. Files are plain NumPy arrays (no pickle): texts as UTF-8 bytes with offsets, token
columns concatenated with offsets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

_META = "replay.json"
_ARRAYS = "replay.npz"


def _kind(values: Sequence[Any]) -> str:
    first = values[0]
    if isinstance(first, str):
        return "text"
    if isinstance(first, (np.ndarray, list, tuple)):
        return "tokens"
    return "number"


class ReplayBuffer:
    """Uniform-sampling ring buffer of transitions (see the module docstring)."""

    def __init__(self, capacity: int, seed: int = 0):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.rng = np.random.default_rng(seed)
        self.columns: dict[str, list | np.ndarray] = {}
        self.kinds: dict[str, str] = {}
        self.size = 0
        self.next = 0  # the slot the next transition goes to
        self.added = 0  # transitions ever added

    def __len__(self) -> int:
        return self.size

    def _declare(self, batch: dict[str, Sequence[Any]]) -> None:
        for name, values in batch.items():
            kind = _kind(values)
            self.kinds[name] = kind
            if kind == "number":
                dtype = np.asarray(values).dtype
                dtype = np.float32 if np.issubdtype(dtype, np.floating) else dtype
                self.columns[name] = np.zeros(self.capacity, dtype)
            else:
                self.columns[name] = [None] * self.capacity

    def add(self, **batch: Sequence[Any]) -> None:
        """Appends transitions: one equal-length sequence per column."""
        lengths = {len(v) for v in batch.values()}
        if len(lengths) != 1:
            raise ValueError(f"columns have different lengths: { {k: len(v) for k, v in batch.items()} }")
        (count,) = lengths
        if count == 0:
            return
        if not self.kinds:
            self._declare(batch)
        elif set(batch) != set(self.kinds):
            raise ValueError(f"columns {sorted(batch)} differ from the buffer's {sorted(self.kinds)}")
        slots = (self.next + np.arange(count)) % self.capacity
        for name, values in batch.items():
            if self.kinds[name] == "number":
                self.columns[name][slots] = np.asarray(values)
            else:
                column = self.columns[name]
                for slot, value in zip(slots, values):
                    column[slot] = str(value) if self.kinds[name] == "text" else np.asarray(value, np.int32)
        self.next = int((self.next + count) % self.capacity)
        self.size = min(self.size + count, self.capacity)
        self.added += count

    def add_column(self, name: str, fill: float) -> None:
        """A number column every stored transition holds as ``fill`` (a buffer saved before the
        column existed, resumed by code that adds it)."""
        if name in self.kinds:
            raise ValueError(f"the buffer already has a column {name!r}")
        self.kinds[name] = "number"
        self.columns[name] = np.full(self.capacity, fill, np.asarray(fill).dtype)

    def sample(self, count: int) -> dict[str, Any]:
        """``count`` transitions drawn uniformly with replacement."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        index = self.rng.integers(0, self.size, count)
        return self.gather(index)

    def sample_from(self, positions: np.ndarray, count: int) -> dict[str, Any]:
        """``count`` transitions drawn uniformly with replacement among ``positions`` (e.g. those of
        the best trajectories, for filtered BC), with the buffer's generator."""
        positions = np.asarray(positions)
        if positions.size == 0:
            raise ValueError("cannot sample from an empty set of positions")
        return self.gather(positions[self.rng.integers(0, positions.size, count)])

    def gather(self, index: np.ndarray) -> dict[str, Any]:
        """The transitions at ``index`` (positions among the stored ones)."""
        out: dict[str, Any] = {}
        for name, kind in self.kinds.items():
            column = self.columns[name]
            out[name] = column[index] if kind == "number" else [column[i] for i in index]
        return out

    # ---- persistence ----------------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes the buffer (data, positions and RNG state) to ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        for name, kind in self.kinds.items():
            column = self.columns[name]
            if kind == "number":
                arrays[f"{name}/values"] = column[: self.size]
                continue
            if kind == "text":
                pieces = [s.encode("utf-8") for s in column[: self.size]]
                flat = np.frombuffer(b"".join(pieces), np.uint8)
            else:
                pieces = column[: self.size]
                flat = np.concatenate(pieces).astype(np.int32) if pieces else np.zeros(0, np.int32)
            arrays[f"{name}/flat"] = flat
            arrays[f"{name}/offsets"] = np.cumsum([0] + [len(p) for p in pieces]).astype(np.int64)
        tmp = directory / f"{_ARRAYS}.tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, directory / _ARRAYS)
        meta = dict(capacity=self.capacity, size=self.size, next=self.next, added=self.added, kinds=self.kinds,
                    rng=self.rng.bit_generator.state)
        (directory / _META).write_text(json.dumps(meta))
        return directory

    @classmethod
    def restore(cls, directory: str | os.PathLike) -> ReplayBuffer:
        """The buffer saved in ``directory``, ready to add and sample exactly where it stopped."""
        directory = Path(directory)
        if not (directory / _META).is_file() or not (directory / _ARRAYS).is_file():
            raise FileNotFoundError(f"no replay buffer in {directory} (expected {_META} and {_ARRAYS})")
        meta = json.loads((directory / _META).read_text())
        buffer = cls(meta["capacity"])
        buffer.rng.bit_generator.state = meta["rng"]
        buffer.size, buffer.next, buffer.added = meta["size"], meta["next"], meta["added"]
        buffer.kinds = dict(meta["kinds"])
        with np.load(directory / _ARRAYS) as arrays:
            for name, kind in buffer.kinds.items():
                if kind == "number":
                    values = arrays[f"{name}/values"]
                    column = np.zeros(buffer.capacity, values.dtype)
                    column[: buffer.size] = values
                    buffer.columns[name] = column
                    continue
                flat, offsets = arrays[f"{name}/flat"], arrays[f"{name}/offsets"]
                pieces = [flat[offsets[i] : offsets[i + 1]] for i in range(buffer.size)]
                if kind == "text":
                    pieces = [bytes(p).decode("utf-8") for p in pieces]
                else:
                    pieces = [np.asarray(p, np.int32) for p in pieces]
                buffer.columns[name] = pieces + [None] * (buffer.capacity - buffer.size)
        return buffer
