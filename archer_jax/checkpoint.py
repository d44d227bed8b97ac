"""Checkpoints of a training run through orbax: networks, optimizer states, replay buffer, loop state.

    checkpoints = Checkpoints(workdir / "checkpoints", keep=2)
    checkpoints.save(step, critic=critic_state, actor=actor_state, replay=buffer, loop={...})
    step = checkpoints.latest()            # the newest complete checkpoint, or None
    critic, actor, buffer, loop = checkpoints.restore(step, critic=critic_like, actor=actor_like)

Orbax writes each checkpoint to a temporary directory and renames it when every item is written,
so a process killed while saving leaves the previous checkpoint as the latest complete one. The
replay buffer is an orbax item of its own (:class:`ReplayHandler`, plain NumPy files with its RNG
state); the loop state (iteration, counters, metric history, RNG seeds) is JSON.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from archer_jax.learners.train_state import TrainState
from archer_jax.replay import ReplayBuffer


class ReplayHandler(ocp.CheckpointHandler):
    """Saves a :class:`ReplayBuffer` under ``process_0``. With several processes every host holds
    the same replica (:mod:`archer_jax.distributed`): the primary writes it and every host reads it."""

    def _directory(self, directory) -> Path:
        return Path(os.fspath(directory)) / "process_0"

    def save(self, directory, args: ReplaySave):
        if jax.process_index() == 0:
            args.buffer.save(self._directory(directory))

    def restore(self, directory, args: ReplayRestore | None = None) -> ReplayBuffer:
        return ReplayBuffer.restore(self._directory(directory))


@ocp.args.register_with_handler(ReplayHandler, for_save=True)
@dataclasses.dataclass
class ReplaySave(ocp.args.CheckpointArgs):
    buffer: ReplayBuffer


@ocp.args.register_with_handler(ReplayHandler, for_restore=True)
@dataclasses.dataclass
class ReplayRestore(ocp.args.CheckpointArgs):
    pass


def _as_item(state: TrainState) -> dict[str, Any]:
    return {k: v for k, v in state._asdict().items() if v is not None}


def _as_state(item: dict[str, Any]) -> TrainState:
    return TrainState(item["params"], item["opt_state"], item.get("target"), item["step"], item["skipped"])


class Checkpoints:
    """The run's checkpoints in ``directory`` (the newest ``keep`` are kept)."""

    def __init__(self, directory: str | os.PathLike, keep: int = 2):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def latest(self) -> int | None:
        """The step of the newest complete checkpoint (None when there is none)."""
        self.manager.reload()
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        self.manager.reload()
        return list(self.manager.all_steps())

    def save(
        self,
        step: int,
        *,
        actor: TrainState,
        critic: TrainState | None,
        replay: ReplayBuffer,
        loop: dict[str, Any],
    ) -> None:
        """Writes checkpoint ``step`` (blocking until it is complete)."""
        items = dict(actor=ocp.args.StandardSave(_as_item(actor)), replay=ReplaySave(replay), loop=ocp.args.JsonSave(loop))
        if critic is not None:
            items["critic"] = ocp.args.StandardSave(_as_item(critic))
        self.manager.save(step, args=ocp.args.Composite(**items), force=True)
        self.manager.wait_until_finished()

    def restore(
        self, step: int, *, actor: TrainState, critic: TrainState | None
    ) -> tuple[TrainState, TrainState | None, ReplayBuffer, dict[str, Any]]:
        """Checkpoint ``step``; ``actor``/``critic`` give the structure, shapes and shardings
        (e.g. freshly initialised states)."""

        def abstract(state: TrainState):
            return ocp.args.StandardRestore(jax.tree.map(ocp.utils.to_shape_dtype_struct, _as_item(state)))

        items = dict(actor=abstract(actor), replay=ReplayRestore(), loop=ocp.args.JsonRestore())
        if critic is not None:
            items["critic"] = abstract(critic)
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        critic_state = _as_state(restored["critic"]) if critic is not None else None
        return _as_state(restored["actor"]), critic_state, restored["replay"], restored["loop"]

    def close(self) -> None:
        self.manager.close()
