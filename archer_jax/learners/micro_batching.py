"""Micro-batching by memory: each learner step runs its batch in the largest micro-batches that fit.

A step's batch (``batch_size × grad_accum_steps`` transitions in a run's config) is a
hyperparameter; how it is cut into micro-batches, whose gradients a ``lax.scan`` averages, is only
a memory device (:func:`~archer_jax.learners.optimization.accumulate_gradients`: the step's loss
and update are the same for every layout, up to float rounding). The official code's micro-batches
of 8 were its GPUs' memory limit; on other devices they only make the matrix products small.

With ``micro_batch_size="auto"`` a :class:`StepProgram` compiles the step for the whole batch (or
its ``limit``) in one micro-batch and reads the compiled program's memory analysis (XLA's buffer assignment: its
temporaries and new outputs, plus the batch itself). If that does not fit in :data:`HEADROOM` of
the device's free memory (:func:`device_free_bytes`: ``Device.memory_stats()`` on GPUs and TPUs, the
host's available memory for CPU devices), it compiles smaller micro-batches until one fits,
guided by a line through the two ends; when even the smallest does not fit, the step stops with
an error that says what to change, except on CPU devices (:func:`shares_host_memory`), which run
the smallest with a warning. On CPUs the run limits "auto" to the config's
``batch_size`` (:func:`auto_limit`): there, larger micro-batches leave the caches and ran slower
(GPT-2 + RoBERTa-base, 32 transitions on a 2-core CPU: critic and actor programs 30.6 s each in
micro-batches of 8, 36.7 and 36.2 s in one of 32), and memory is rarely what limits them. The choice is made once per batch shape (each length
bucket), logged, and kept in :attr:`StepProgram.layouts`; the compiled program that fits is the
one the step then runs (an AOT compilation fills ``jax.jit``'s cache). An integer
``micro_batch_size`` fixes the layout instead. Remat (``config.model.remat``) trades compute for
memory, so "auto" then finds larger micro-batches.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from archer_jax import sharding as shd
from archer_jax.errors import ConfigError, TrainingError
from archer_jax.precision import program_name

log = logging.getLogger(__name__)

AUTO = "auto"
HEADROOM = 0.9  # the fraction of a device's free memory a step's plan may use


def size_text(n: float) -> str:
    """Bytes as ``1.23 GiB`` (or MiB below a GiB)."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one step's batch is cut: ``count`` micro-batches of ``size`` transitions."""

    size: int
    count: int
    need_bytes: int | None = None  # per device, from the compiled program's memory analysis
    free_bytes: int | None = None  # per device, when the layout was chosen (None: not measured)


def parse_micro_batch_size(value: int | str) -> int | None:
    """``"auto"`` -> None; a positive int (or its decimal string, as a command line gives it) -> int."""
    if isinstance(value, str):
        if value.strip() == AUTO:
            return None
        if value.strip().isdigit():
            value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"micro_batch_size must be 'auto' or a positive integer, got {value!r}")
    return value


def auto_limit(platform: str, batch_size: int) -> int | None:
    """The largest micro-batch "auto" considers on ``platform``: ``batch_size`` (the config's, the
    official layout's micro-batch) on CPUs, no limit on accelerators."""
    return batch_size if platform == "cpu" else None


def candidate_sizes(batch: int, multiple: int = 1) -> list[int]:
    """Micro-batch sizes that cut ``batch`` rows evenly and split evenly over ``multiple`` devices
    (the divisors of ``batch`` that are multiples of ``multiple``), largest first."""
    return [size for size in range(batch, 0, -1) if batch % size == 0 and size % multiple == 0]


def _host_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_free_bytes(devices: Sequence[jax.Device]) -> int | None:
    """The least free memory of ``devices`` (this process's): ``bytes_limit - bytes_in_use`` where the
    device reports it (GPU, TPU), else the host's available memory shared among its CPU devices.
    None when neither is known."""
    free = []
    for device in (d for d in devices if d.process_index == jax.process_index()):
        stats = device.memory_stats()
        if stats and "bytes_limit" in stats:
            free.append(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))
        else:
            host = _host_available_bytes()
            if host is None:
                return None
            free.append(host // max(1, len(jax.local_devices(backend=device.platform))))
    return min(free) if free else None


def shares_host_memory(devices) -> bool:
    """Whether ``devices`` are CPU devices, whose free memory is the host's: a moment's reading that
    other processes move, so a step that seems not to fit there runs anyway (a warning says so),
    where a GPU's or TPU's own limit refuses it."""
    return all(device.platform == "cpu" for device in devices)


def program_bytes(compiled: jax.stages.Compiled, batch_bytes: int) -> int | None:
    """Per-device bytes a compiled step adds to what is already resident (its donated state): its
    temporaries, the outputs that do not reuse a donated input, its code and its share of the batch.
    None when the backend gives no memory analysis."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    new_outputs = max(0, analysis.output_size_in_bytes - analysis.alias_size_in_bytes)
    return int(analysis.temp_size_in_bytes + new_outputs + analysis.generated_code_size_in_bytes + batch_bytes)


_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def out_of_memory(error: Exception) -> bool:
    """Whether a compilation failed because the program does not fit the device (TPU compilers say so)."""
    return "RESOURCE_EXHAUSTED" in str(error) or "Ran out of memory" in str(error)


def exhausted_bytes(message: str, batch_bytes: int) -> int | None:
    """What a program the compiler refused needs per device, as :func:`program_bytes` counts it,
    from the compiler's message ("... HLO temporaries (17.48G) exceeds ..."); None if it says not."""
    match = re.search(r"HLO temporaries \(([\d.]+)([KMGT])\)", message)
    return int(float(match.group(1)) * _UNITS[match.group(2)]) + batch_bytes if match else None


def _batch_key(batch) -> tuple:
    return tuple((tuple(leaf.shape), str(leaf.dtype)) for leaf in jax.tree.leaves(batch))


def _describe(batch) -> str:
    shapes = sorted({tuple(leaf.shape[1:]) for leaf in jax.tree.leaves(batch) if leaf.ndim > 1})
    return "lengths " + "/".join(str(s[0]) for s in shapes) if shapes else "no token axes"


class FrozenApart:
    """``jax.jit`` of a step whose first argument is a :class:`TrainState`, with the state's frozen
    weights (a LoRA policy's base) passed as an argument of their own: the state is donated (updated
    in place) but the frozen weights are not, so every reference to them stays valid and they are
    never copied. Called, and lowered, with the same arguments as the step."""

    def __init__(self, step: Callable, *, in_shardings, out_shardings, donate_argnums=()):
        state_sh, *rest_sh = in_shardings
        self._jit = jax.jit(
            self._apart(step),
            in_shardings=(state_sh._replace(frozen=None), state_sh.frozen, *rest_sh),
            out_shardings=(out_shardings[0]._replace(frozen=None), *out_shardings[1:]),
            donate_argnums=donate_argnums,
        )

    @staticmethod
    def _apart(step: Callable) -> Callable:
        def program(state, frozen, *rest):
            new, *out = step(state._replace(frozen=frozen), *rest)
            return (new._replace(frozen=None), *out)

        program.__name__ = program_name(step)  # what XLA names the program (not functools.wraps: its
        return program  # __wrapped__ would give jit the step's signature, without ``frozen``

    def __call__(self, state, *rest):
        new, *out = self._jit(state._replace(frozen=None), state.frozen, *rest)
        return (new._replace(frozen=state.frozen), *out)

    def lower(self, state, *rest) -> jax.stages.Lowered:
        return self._jit.lower(state._replace(frozen=None), state.frozen, *rest)


class StepProgram:
    """One learner step (``step(*args, micro_batches=n)``, its batch the last argument), jitted once
    per micro-batch count, with the count chosen per batch shape (see the module docstring)."""

    def __init__(
        self,
        step: Callable,
        *,
        mesh: Mesh,
        micro_batch_size: int | str = AUTO,
        free_bytes: Callable[[Sequence[jax.Device]], int | None] | None = None,
        limit: int | None = None,
        **jit_kwargs,
    ):
        self.step = step
        self.name = program_name(step)
        self.mesh = mesh
        self.fixed = parse_micro_batch_size(micro_batch_size)
        self.free_bytes = free_bytes  # None: device_free_bytes
        self.limit = limit  # "auto" takes micro-batches of at most this many transitions (None: no limit)
        self.jit_kwargs = jit_kwargs  # in_shardings, out_shardings, donate_argnums
        self.layouts: dict[tuple, Layout] = {}
        self._jitted: dict[int, Callable] = {}
        self._compiled: dict[tuple, jax.stages.Compiled] = {}  # (batch shape, count): what "auto" compiled

    def jitted(self, count: int) -> "FrozenApart":
        """The step jitted for ``count`` micro-batches (named as the step)."""
        if count not in self._jitted:
            self._jitted[count] = FrozenApart(functools.partial(self.step, micro_batches=count), **self.jit_kwargs)
        return self._jitted[count]

    def __call__(self, *args):
        # With several processes a host's NumPy batch (the same on every host) becomes a global array.
        args = (*args[:-1], shd.global_arrays(args[-1], self.jit_kwargs["in_shardings"][-1]))
        return self.jitted(self.layout(*args).count)(*args)

    def lower(self, *args) -> jax.stages.Lowered:
        """The step lowered for ``args`` (arrays or ``ShapeDtypeStruct``s) in its chosen layout."""
        return self.jitted(self.layout(*args).count).lower(*args)

    def compile(self, *args) -> jax.stages.Compiled:
        """The step compiled for ``args`` (arrays or ``ShapeDtypeStruct``s) in its chosen layout,
        without compiling again what choosing the layout compiled."""
        count = self.layout(*args).count
        key = (_batch_key(args[-1]), count)
        if key not in self._compiled:
            self._compiled[key] = self.jitted(count).lower(*args).compile()
        return self._compiled[key]

    def layout(self, *args) -> Layout:
        """The layout of ``args``' batch shape: chosen (and compiled, for "auto") on first sight."""
        batch = args[-1]
        key = _batch_key(batch)
        if key not in self.layouts:
            self.layouts[key] = self._choose(args)
            chosen = self.layouts[key]
            need = "" if chosen.need_bytes is None else f", {size_text(chosen.need_bytes)} per device"
            free = "" if chosen.free_bytes is None else f" of {size_text(chosen.free_bytes)} free"
            log.info("%s (%s): %d micro-batch(es) of %d transitions%s%s", self.name, _describe(batch),
                     chosen.count, chosen.size, need, free)
        return self.layouts[key]

    def _choose(self, args) -> Layout:
        leaves = jax.tree.leaves(args[-1])
        rows, multiple = leaves[0].shape[0], shd.batch_size_multiple(self.mesh)
        sizes = candidate_sizes(rows, multiple)
        if not sizes:
            raise ValueError(f"batch size {rows} is not a multiple of the mesh's batch axes ({multiple} = data x fsdp)")
        if self.fixed is None and self.limit is not None:
            sizes = [s for s in sizes if s <= self.limit] or sizes[-1:]
        if self.fixed is not None:
            size = min(self.fixed, rows)
            if size not in sizes:
                raise ConfigError(f"learner.micro_batch_size {self.fixed} does not cut a batch of {rows} into equal micro-batches "
                                 f"that split over the mesh's batch axes ({multiple} = data x fsdp); try one of {sizes}")
            return Layout(size, rows // size)
        free = (self.free_bytes or device_free_bytes)(list(self.mesh.devices.flat))
        if jax.process_count() > 1:  # every process must compile the same program: the least free memory
            from jax.experimental import multihost_utils

            known = multihost_utils.process_allgather(np.int64(-1 if free is None else free))
            free = None if (known < 0).all() else int(known[known >= 0].min())
        if free is None:
            return Layout(rows, 1)
        budget = HEADROOM * free
        batch_bytes = sum(np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape)) for leaf in leaves) // multiple
        needs: dict[int, int | None] = {}

        def need(size: int) -> int | None:
            if size not in needs:
                try:
                    compiled = self.jitted(rows // size).lower(*args).compile()
                except jax.errors.JaxRuntimeError as e:  # a TPU compiler refuses what cannot fit its HBM
                    if not out_of_memory(e):
                        raise
                    needs[size] = exhausted_bytes(str(e), batch_bytes) or int(2 * budget) + 1
                    return needs[size]
                if any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves):
                    self._compiled[(_batch_key(args[-1]), rows // size)] = compiled  # a plan's: kept for compile()
                needs[size] = program_bytes(compiled, batch_bytes)
            return needs[size]

        def fits(size: int) -> bool:
            n = need(size)
            return n is None or n <= budget

        largest, smallest = sizes[0], sizes[-1]
        if fits(largest):
            return Layout(largest, rows // largest, needs[largest], free)
        if not fits(smallest):
            if self.free_bytes is None and shares_host_memory(self.mesh.devices.flat):
                log.warning("%s: micro-batches of %d transitions (%s) need %s per device, more than %.0f%% of the "
                            "host's %s available now (other processes share it): running them anyway", self.name,
                            smallest, _describe(args[-1]), size_text(needs[smallest]), 100 * HEADROOM, size_text(free))
                return Layout(smallest, rows // smallest, needs[smallest], free)
            raise TrainingError(
                f"{self.name}: micro-batches of {smallest} transitions ({_describe(args[-1])}) need "
                f"{size_text(needs[smallest])} per device, {size_text(free)} free: set config.model.remat "
                f"(dots or full), shorten config.model.max_prompt_length/max_critic_length, or use more devices")
        # Memory grows about linearly with the micro-batch: skip the sizes a line through both ends
        # rules out, then compile down from the largest it allows until one fits.
        slope = (needs[largest] - needs[smallest]) / (largest - smallest)
        for size in sizes[1:]:
            if size == smallest or (needs[smallest] + slope * (size - smallest) <= budget and fits(size)):
                return Layout(size, rows // size, needs[size], free)
        raise AssertionError("unreachable: the smallest size fits")
