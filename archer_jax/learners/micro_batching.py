"""Micro-batching by memory: each learner step runs its batch in the largest micro-batches that fit.

A step's batch (``batch_size × grad_accum_steps`` transitions in a run's config) is a
hyperparameter; how it is cut into micro-batches, whose gradients a ``lax.scan`` averages, is only
a memory device (:func:`~archer_jax.learners.optimization.accumulate_gradients`: the step's loss
and update are the same for every layout, up to float rounding). The official code's micro-batches
of 8 were its GPUs' memory limit; on other devices they only make the matrix products small.

With ``micro_batch_size="auto"`` a :class:`~archer_jax.learners.step_program.StepProgram` compiles the step for the whole batch (or
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
bucket), logged, and kept in :attr:`~archer_jax.learners.step_program.StepProgram.layouts`; the compiled program that fits is the
one the step then runs (an AOT compilation fills ``jax.jit``'s cache). An integer
``micro_batch_size`` fixes the layout instead. Remat (``config.model.remat``) trades compute for
memory, so "auto" then finds larger micro-batches.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

import jax

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
