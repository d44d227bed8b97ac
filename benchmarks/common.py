"""Helpers shared by the benchmark scripts: timing, the machine's description, result files."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from archer_jax.runtime import xla_flags

xla_flags.set_default_flags()  # as the train app does, before JAX starts a backend
xla_flags.quiet_tpu_probe()

import jax  # noqa: E402

RESULTS = Path(__file__).parent / "results"

# Peak memory bandwidth (bytes/s) by device kind, for roofline fractions. Matched as substrings
# of jax.Device.device_kind; pass --peak-bandwidth for anything else.
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100": 3.35e12,  # SXM; the PCIe card has 2.0e12
    "A100": 2.0e12,
    "L4": 0.3e12,
    "TPU v4": 1.2e12,
    "TPU v5 lite": 0.819e12,
    "TPU v5e": 0.819e12,
    "TPU v5p": 2.765e12,
    "TPU v5": 2.765e12,
    "TPU v6 lite": 1.64e12,
}


# Peak dense matmul FLOP/s by device kind and dtype, for MFU (float32 on GPUs runs as TF32).
PEAK_FLOPS = {
    "H200": {"bfloat16": 989e12, "float32": 494e12},
    "H100": {"bfloat16": 989e12, "float32": 494e12},  # SXM
    "A100": {"bfloat16": 312e12, "float32": 156e12},
    "TPU v4": {"bfloat16": 275e12, "float32": 275e12},
    "TPU v5 lite": {"bfloat16": 197e12, "float32": 197e12},
    "TPU v5e": {"bfloat16": 197e12, "float32": 197e12},
    "TPU v5p": {"bfloat16": 459e12, "float32": 459e12},
    "TPU v6 lite": {"bfloat16": 918e12, "float32": 918e12},
}


def time_call(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(first call seconds, median seconds of ``repeats`` further calls); ``fn`` must block."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times) if times else first


def peak_bandwidth(device: jax.Device, override: float | None = None) -> float | None:
    """The device's peak memory bandwidth in bytes/s, or None when unknown (CPUs)."""
    if override:
        return override
    kind = getattr(device, "device_kind", "")
    return next((bw for name, bw in PEAK_BANDWIDTH.items() if name in kind), None)


def peak_flops(device: jax.Device, dtype: str, override: float | None = None) -> float | None:
    """The device's peak dense matmul FLOP/s for ``dtype``, or None when unknown (CPUs)."""
    if override:
        return override
    kind = getattr(device, "device_kind", "")
    return next((peaks[dtype] for name, peaks in PEAK_FLOPS.items() if name in kind), None)


def decode_floor_s(param_bytes: int, config, batch: int, slots: int, itemsize: int, bandwidth: float) -> float:
    """The memory-bandwidth floor of one decode step: every parameter and the whole KV cache
    (``batch x slots`` positions, keys and values of every layer) read once."""
    cache_bytes = 2 * config.n_layer * batch * slots * config.n_embd * itemsize
    return (param_bytes + cache_bytes) / bandwidth


def machine() -> dict:
    """What the numbers were measured on."""
    device = jax.devices()[0]
    return dict(
        date=datetime.date.today().isoformat(),
        backend=jax.default_backend(),
        device=str(device),
        device_kind=getattr(device, "device_kind", ""),
        device_count=jax.device_count(),
        cpu_count=os.cpu_count(),
        platform=platform.platform(),
        jax=jax.__version__,
    )


def print_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> None:
    """Prints ``rows`` with ``columns`` = (key, header, format spec); missing values print as '-'."""
    def cell(row: dict, key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    widths = [max([len(header), 10] + [len(cell(r, key, spec)) for r in rows]) + 2 for key, header, spec in columns]
    print("".join(f"{header:>{w}}" for (_, header, _), w in zip(columns, widths)))
    for row in rows:
        print("".join(f"{cell(row, key, spec):>{w}}" for (key, _, spec), w in zip(columns, widths)))


def write_result(name: str, config: dict, rows: Sequence[dict], out: Path = RESULTS, extra: dict | None = None) -> Path:
    """Writes ``{out}/{name}.json`` with the machine, the configuration, the rows and ``extra``,
    every path in them relative to the repository (:func:`portable`)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    result = dict(benchmark=name, machine=machine(), config=config, rows=list(rows), **(extra or {}))
    path.write_text(json.dumps(portable(result), indent=2) + "\n")
    return path


ROOT = Path(__file__).resolve().parents[1]


def portable(value):
    """``value`` (a dict, list or scalar, nested) with every absolute path made relative to the
    repository, or cut to its last component when it lies outside: results name no machine's paths."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    if isinstance(value, Path) or (isinstance(value, str) and (os.path.isabs(value) or value.startswith("~"))):
        path = Path(os.path.expanduser(str(value)))
        if not path.is_absolute():
            return str(value)
        try:
            return path.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            return path.name
    return value


def commit_files(paths: Sequence[Path], message: str) -> None:
    """Commits ``paths`` only (whatever else is staged stays staged), retrying while another git
    command holds the index."""
    names = [str(Path(p).resolve()) for p in paths]
    for _ in range(5):
        if not subprocess.run(["git", "add", "--", *names], cwd=ROOT).returncode and not subprocess.run(
                ["git", "commit", "-q", "-m", message, "--", *names], cwd=ROOT).returncode:
            return
        time.sleep(5)
