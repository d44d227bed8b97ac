"""Checkpoints of a training run through orbax: networks, optimizer states, replay buffer, loop state.

    checkpoints = Checkpoints(workdir / "checkpoints", keep=2)
    checkpoints.save(step, critic=critic_state, actor=actor_state, replay=buffer, loop={...})
    step = checkpoints.latest()            # the newest complete checkpoint, or None
    critic, actor, buffer, loop = checkpoints.restore(step, critic=critic_like, actor=actor_like)
    step, restored = checkpoints.restore_latest(actor=actor_like, critic=critic_like)  # the newest that loads

Orbax writes each checkpoint to a temporary directory and renames it when every item is written,
so a process killed while saving leaves the previous checkpoint as the latest complete one. The
replay buffer is an orbax item of its own (:class:`ReplayHandler`, plain NumPy files with its RNG
state); the loop state (iteration, counters, metric history, RNG seeds) is JSON.

A checkpoint can be complete and still not load (a truncated array file, a damaged replay buffer
or loop state: a full disk, a bad copy), or load values that are not the ones saved (flipped bits
in an array file that still decodes): each save records a SHA-256 of every array it writes in the
loop state (``array_digests``), and a restore whose arrays do not match them fails. :meth:`Checkpoints.restore_latest` then takes the newest
one that loads completely, warns in one line which steps it skipped and why, and moves those aside
to ``<directory>.unreadable/`` (kept for inspection, and out of the way of the steps the run will
save again; orbax's rotation would otherwise count them and could delete the good one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from archer_jax.data.offline_replay import saved_state
from archer_jax.errors import CheckpointWriteError, ConfigError, TrainingError, one_line
from archer_jax.learners.train_state import TrainState
from archer_jax.replay import ReplayBuffer

log = logging.getLogger("archer_jax")

Restored = tuple[TrainState, "TrainState | None", ReplayBuffer, dict[str, Any]]


def checkpoint_directory(init_from: str | Path) -> Path:
    """The checkpoints directory of ``init_from`` (a workdir or the directory itself)."""
    path = Path(init_from).expanduser()
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if not directory.is_dir():
        raise ConfigError(f"config.init_from: {path} is not a run's workdir (no checkpoints directory)")
    return directory


class ReplayHandler(ocp.CheckpointHandler):
    """Saves a :class:`ReplayBuffer` under ``process_0``. With several processes every host holds
    the same replica (:mod:`archer_jax.runtime.distributed`): the primary writes it and every host reads it."""

    def _directory(self, directory) -> Path:
        return Path(os.fspath(directory)) / "process_0"

    def save(self, directory, args: ReplaySave):
        if jax.process_index() == 0:
            args.buffer.save(self._directory(directory))

    def restore(self, directory, args: ReplayRestore | None = None) -> ReplayBuffer | dict:
        """The buffer; for an offline run, the sampler state its dataset resumes from
        (:meth:`archer_jax.data.offline_replay.OfflineReplay.resume`)."""
        offline = saved_state(self._directory(directory))
        return offline if offline is not None else ReplayBuffer.restore(self._directory(directory))


@ocp.args.register_with_handler(ReplayHandler, for_save=True)
@dataclasses.dataclass
class ReplaySave(ocp.args.CheckpointArgs):
    buffer: ReplayBuffer


@ocp.args.register_with_handler(ReplayHandler, for_restore=True)
@dataclasses.dataclass
class ReplayRestore(ocp.args.CheckpointArgs):
    pass


def _as_item(state: TrainState) -> dict[str, Any]:
    """What a checkpoint holds of ``state``: all but its frozen weights (the pretrained ones the
    run loads again; a LoRA checkpoint holds the adapters only)."""
    return {k: v for k, v in state._asdict().items() if v is not None and k != "frozen"}


def _as_state(item: dict[str, Any], frozen=None) -> TrainState:
    return TrainState(item["params"], item["opt_state"], item.get("target"), item["step"], item["skipped"], frozen)


class Checkpoints:
    """The run's checkpoints in ``directory`` (the newest ``keep`` are kept)."""

    def __init__(self, directory: str | os.PathLike, keep: int = 2):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        _write_each_array_once()
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def latest(self) -> int | None:
        """The step of the newest complete checkpoint (None when there is none)."""
        self.manager.reload()
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        self.manager.reload()
        return list(self.manager.all_steps())

    def loop_record(self, step: int) -> dict[str, Any] | None:
        """Checkpoint ``step``'s loop state as written (None where it does not read), without its arrays."""
        try:
            record = json.loads((self.directory / str(step) / "loop" / "metadata").read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def save(
        self,
        step: int,
        *,
        actor: TrainState,
        critic: TrainState | None,
        replay: ReplayBuffer,
        loop: dict[str, Any],
    ) -> None:
        """Writes checkpoint ``step`` (blocking until it is complete). :class:`CheckpointWriteError`
        when there is not room for it (checked first) or writing it fails; nothing of it is left."""
        states = dict(actor=actor) if critic is None else dict(actor=actor, critic=critic)
        self._check_space(step, states, replay)
        loop = dict(loop, array_digests={name: array_digests(_as_item(state)) for name, state in states.items()})
        items = dict(replay=ReplaySave(replay), loop=ocp.args.JsonSave(loop))
        items.update({name: ocp.args.StandardSave(_as_item(state)) for name, state in states.items()})
        with _quiet_orbax_failures():
            try:
                self.manager.save(step, args=ocp.args.Composite(**items), force=True)
                self.manager.wait_until_finished()
                error = None
            except Exception as e:  # noqa: BLE001 - orbax raises whatever its writers raised
                error = one_line(e)
                self._remove_partial(step)
        if error is not None:
            raise CheckpointWriteError(f"checkpoint {step} could not be written to {self.directory} ({error})")

    def _check_space(self, step: int, states: dict[str, TrainState], replay) -> None:
        """Refuses checkpoint ``step`` where the disk has less room than it surely takes: the newest
        checkpoint's size (the same arrays; the replay buffer only grows), or for the first one its
        parameters and replay buffer (orbax compresses the rest). One process only: several hosts
        must take the same decision, and orbax's own failure is reported as well."""
        if jax.process_count() > 1:
            return
        latest = self.latest()
        if latest is not None:
            needed = sum(p.stat().st_size for p in (self.directory / str(latest)).rglob("*") if p.is_file())
        else:
            needed = sum(_nbytes(s.params) for s in states.values()) + _replay_nbytes(replay)
        free = shutil.disk_usage(self.directory).free
        if free < needed:
            raise CheckpointWriteError(f"checkpoint {step} needs about {needed / 2**20:.1f} MiB in {self.directory}, but "
                                       f"{free / 2**20:.1f} MiB are free")

    def _remove_partial(self, step: int) -> None:
        """Deletes what a failed save of ``step`` left (orbax's temporary directory), freeing its space."""
        if jax.process_index() == 0:
            for _ in range(5):  # writes still in flight when orbax gave up may create directories again
                for path in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
                    shutil.rmtree(path, ignore_errors=True)
                time.sleep(0.2)
                if not any(self.directory.glob(f"{step}.orbax-checkpoint-tmp*")):
                    break
        self.manager.reload()

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
        _check_files(self.directory / str(step), [name for name in ("actor", "critic") if name in items])
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        loop = dict(restored["loop"])
        recorded = loop.pop("array_digests", None)  # None: a checkpoint from before they were recorded
        for name in ("actor", "critic") if recorded is not None else ():
            if name in items and name in recorded:
                _check_digests(name, recorded[name], array_digests(restored[name]))
        critic_state = _as_state(restored["critic"]) if critic is not None else None
        return _as_state(restored["actor"], actor.frozen), critic_state, restored["replay"], loop

    def restore_latest(self, *, actor: TrainState, critic: TrainState | None, check=None) -> tuple[int, Restored] | None:
        """The newest checkpoint that loads completely (None when there is no checkpoint).

        ``check(restored)`` may raise to reject a checkpoint whose content is wrong (e.g. the loop
        state does not parse). Newer checkpoints that do not load are moved aside with a one-line
        warning; when none loads, :class:`TrainingError` names each step and why, and nothing moves."""
        failures: list[tuple[int, str]] = []
        for step in sorted(self.all_steps(), reverse=True):
            try:
                restored = self.restore(step, actor=actor, critic=critic)
                if check is not None:
                    check(restored)
            except Exception as e:  # noqa: BLE001 - any failure to load makes the checkpoint unusable
                failures.append((step, one_line(e)))
                continue
            if failures:
                self._set_aside([s for s, _ in failures])
                log.warning("checkpoint(s) %s could not be restored (%s); moved to %s and resumed from step %d",
                            ", ".join(str(s) for s, _ in failures), "; ".join(f"{s}: {r}" for s, r in failures),
                            self.unreadable, step)
            return step, restored
        if failures:
            raise TrainingError(
                f"no checkpoint in {self.directory} can be restored ({'; '.join(f'step {s}: {r}' for s, r in failures)}); "
                "nothing was changed there: use a new --workdir, or move the checkpoints away to start afresh"
            )
        return None

    @property
    def unreadable(self) -> Path:
        """Where checkpoints that do not load are moved."""
        return self.directory.with_name(self.directory.name + ".unreadable")

    def _set_aside(self, steps: list[int]) -> None:
        if jax.process_index() == 0:
            self.unreadable.mkdir(parents=True, exist_ok=True)
            for step in steps:
                target = self.unreadable / f"{step}.{time.strftime('%Y%m%d-%H%M%S')}"
                shutil.move(os.fspath(self.directory / str(step)), os.fspath(target))
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("archer_jax: unreadable checkpoints set aside")
        self.manager.reload()

    def close(self) -> None:
        self.manager.close()


def _write_each_array_once() -> None:
    """In one process, orbax writes each array from one of its replicas. Its replica-parallel
    writing (every replica writes a slice: hosts that share an array share its writing) slices
    each replicated array into one piece per device first, an op dispatched per piece, which buys
    nothing where one process writes them all: a save of the micro preset's states on 8 CPU
    devices took 2.0 s with it and 0.55 s without (benchmarks/README.md). Several processes keep
    orbax's default. What is written is the same arrays; restores read either layout."""
    if jax.process_count() > 1:
        return
    current = ocp.type_handlers.get_type_handler(jax.Array)
    if getattr(current, "_use_replica_parallel", False):
        store = getattr(current, "_array_metadata_store", None)
        absl = logging.getLogger("absl")  # orbax warns of every handler registered over another
        level = absl.level
        absl.setLevel(logging.ERROR)
        try:
            ocp.type_handlers.register_type_handler(
                jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False, array_metadata_store=store),
                override=True)
        finally:
            absl.setLevel(level)


def _nbytes(tree: Any) -> int:
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree) if hasattr(x, "dtype"))


def _replay_nbytes(replay: Any) -> int:
    """About the bytes a replay buffer's save writes (its data and offsets, uncompressed); 0 for an
    offline dataset's sampler, whose state is small."""
    if not isinstance(replay, ReplayBuffer):
        return 0
    total = 0
    for name, kind in replay.kinds.items():
        column = replay.columns[name][: replay.size]
        if kind == "number":
            total += np.asarray(column).nbytes
        elif kind == "text":
            total += sum(len(s.encode("utf-8")) for s in column) + 8 * len(column)
        else:
            total += sum(4 * len(p) for p in column) + 8 * len(column)
    return total


class _OrbaxFailureFilter(logging.Filter):
    """Drops what a failed save makes orbax and asyncio log (an error with a traceback per array
    and per writer task, hundreds of lines): orbax's errors while :meth:`Checkpoints.save` runs (it
    says why in one line), and asyncio's reports of orbax's futures whose error nobody read."""

    active = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        message = record.getMessage()
        if "exception was never retrieved" in message and "orbax" in message:  # collected later, at any time
            return False
        return not (self.active and "orbax" in record.pathname)


_FILTER = _OrbaxFailureFilter()


def _unraisable_of_a_failed_save(unraisable) -> bool:
    """Whether an unraisable error is one a failed save leaves behind: tensorstore's callbacks on
    orbax's closed event loop, or orbax's writer coroutines collected unfinished (at exit too)."""
    value = getattr(unraisable, "exc_value", None)
    if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
        return True
    return "orbax" in repr(getattr(unraisable, "object", ""))


@contextlib.contextmanager
def _quiet_orbax_failures():
    """Within: orbax's errors dropped (:class:`_OrbaxFailureFilter`). Installed for good (once): the
    filter on absl's and asyncio's loggers, and an unraisable hook that drops
    :func:`_unraisable_of_a_failed_save`'s errors."""
    for name in ("absl", "asyncio"):
        if _FILTER not in logging.getLogger(name).filters:
            logging.getLogger(name).addFilter(_FILTER)
    if not getattr(sys.unraisablehook, "_archer_jax", False):
        previous = sys.unraisablehook

        def hook(unraisable) -> None:
            if not _unraisable_of_a_failed_save(unraisable):
                previous(unraisable)

        hook._archer_jax = True
        sys.unraisablehook = hook
    _FILTER.active = True
    try:
        yield
    finally:
        _FILTER.active = False


def array_digests(tree: Any) -> dict[str, str]:
    """The SHA-256 of each array in ``tree`` that this process holds whole (a replicated array
    split across hosts has its local copy hashed; one sharded across hosts is left out), by path."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            if not leaf.sharding.is_fully_replicated:
                continue
            leaf = leaf.addressable_shards[0].data
        data = np.asarray(leaf)
        if data.dtype == object:
            continue
        name = jax.tree_util.keystr(path)
        out[name] = f"{data.dtype}{list(data.shape)} " + hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()
    return out


def _check_files(directory: Path, items: list[str]) -> None:
    """Raises :class:`FileNotFoundError` naming the first index file of an array item that is missing
    (orbax would fail too, but only after starting a read of every array, whose callbacks then
    print a traceback each on a closed event loop)."""
    for item in items:
        folder = directory / item
        required = [folder / "_METADATA", folder / "manifest.ocdbt"]
        required += [d / "manifest.ocdbt" for d in sorted(folder.glob("ocdbt.process_*"))]
        for path in required:
            if not path.is_file():
                raise FileNotFoundError(f"{path.relative_to(directory)} is missing")


def _check_digests(item: str, recorded: dict[str, str], restored: dict[str, str]) -> None:
    """Raises :class:`ValueError` naming the first array whose restored bytes are not the saved ones."""
    for name, digest in recorded.items():
        if name in restored and restored[name] != digest:
            raise ValueError(f"the {item}'s array {name} does not match the checksum saved with it (damaged data)")
