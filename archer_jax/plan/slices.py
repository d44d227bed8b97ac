"""The accelerators a run can be planned for: TPU slices by their gcloud names, and this machine.

    target = slices.get("v5litepod-8")     # 8 v5e chips on one host
    devices = target.devices()              # the slice's devices, on any host (libtpu's compiler)
    target.chip.hbm_bytes, target.chip.peak_flops, target.chip.hbm_bandwidth

A TPU target's devices come from :func:`jax.experimental.topologies.get_topology_desc`: programs
compile for them on a CPU-only machine (the ``tpu`` extra installs libtpu), and cannot run.
``local`` (or ``cpu``, ``gpu``) is this machine's own devices. The chip figures are the vendors'
published peaks per chip (dense bfloat16 matmul FLOP/s, HBM bytes and bandwidth); a roofline time
from them is a lower bound on a program's time.
"""

from __future__ import annotations

import dataclasses
import os
import re

import jax

from archer_jax.runtime.xla_flags import tpu_attached

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One chip's published figures (per chip: a v4 or v5p megacore chip counts as one device)."""

    name: str
    hbm_bytes: int
    peak_flops: float  # dense bfloat16 matmul FLOP/s
    hbm_bandwidth: float  # bytes/s


CHIPS = {
    "v4": Chip("TPU v4", 32 * GiB, 275e12, 1.2e12),
    "v5e": Chip("TPU v5e", 16 * GiB, 197e12, 0.819e12),
    "v5p": Chip("TPU v5p", 95 * GiB, 459e12, 2.765e12),
    "v6e": Chip("TPU v6e", 32 * GiB, 918e12, 1.64e12),
    # GPUs: memory as nvidia-smi reports it (MiB).
    "H100": Chip("NVIDIA H100 SXM", 81559 * 2**20, 989e12, 3.35e12),
    "H200": Chip("NVIDIA H200", 143771 * 2**20, 989e12, 4.8e12),
    "A100": Chip("NVIDIA A100 80GB", 81920 * 2**20, 312e12, 2.0e12),
}

# gcloud's accelerator type prefix -> (chip, topology name prefix, chips per host on multi-host
# slices, whether one device is a megacore chip of two TensorCores counted in the type's number).
_FAMILIES = {
    "v4": ("v4", "v4", (2, 2, 1), True),
    "v5p": ("v5p", "v5p", (2, 2, 1), True),
    "v5litepod": ("v5e", "v5e", (2, 2, 1), False),
    "v6e": ("v6e", "v6e", (2, 2, 1), False),
}
# Chips -> topology, for the sizes gcloud sells (3D tori for v4 and v5p, 2D for v5e and v6e).
_TOPOLOGY_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4"}
_TOPOLOGY_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
LOCAL_NAMES = ("local", "cpu", "gpu")


class TargetError(ValueError):
    """A target name that names no slice we know."""


@dataclasses.dataclass(frozen=True)
class Target:
    """A slice (or this machine): its chips, devices and hosts."""

    name: str
    chip: Chip | None  # None: a local device whose figures are unknown (e.g. a CPU)
    chips: int
    hosts: int
    topology: str | None = None  # e.g. "v5e:2x4"; None for local
    chips_per_host_bounds: tuple[int, int, int] | None = None
    megacore: bool = False

    @property
    def is_tpu(self) -> bool:
        return self.topology is not None

    def devices(self) -> list[jax.Device]:
        """The target's devices: a TPU topology's (compile-only) or this machine's."""
        if not self.is_tpu:
            return list(jax.devices())
        from jax.experimental import topologies

        _quiet_libtpu(self.name)
        kwargs = {"chip_config_name": "megacore"} if self.megacore else {}
        topology = topologies.get_topology_desc(topology_name=self.topology, platform="tpu", num_slices=1,
                                                chips_per_host_bounds=self.chips_per_host_bounds, **kwargs)
        return list(topology.devices)


def _quiet_libtpu(accelerator_type: str) -> None:
    """On a machine without a TPU, libtpu warns on stderr that it cannot find the VM's TPU: tell
    it what it is compiling for, unless the machine's own settings say otherwise."""
    if not tpu_attached():
        # ALLOW_MULTIPLE_LIBTPU_LOAD: compiling only, several processes may load libtpu at once.
        for key, value in (("TPU_ACCELERATOR_TYPE", accelerator_type), ("TPU_WORKER_HOSTNAMES", "localhost"),
                           ("TPU_WORKER_ID", "0"), ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
            os.environ.setdefault(key, value)


def _local() -> Target:
    devices = jax.devices()
    kind = devices[0].device_kind
    chip = next((c for key, c in CHIPS.items() if key in kind), None)
    stats = devices[0].memory_stats() or {}
    if chip is not None and "bytes_limit" in stats:  # what JAX may use here (it keeps a share of a GPU's memory)
        chip = dataclasses.replace(chip, hbm_bytes=int(stats["bytes_limit"]))
    return Target("local", chip, len(devices), jax.process_count())


def names() -> list[str]:
    """Target names as gcloud gives accelerator types (the common sizes), and ``local``."""
    out = []
    for family, (_, _, _, megacore) in _FAMILIES.items():
        sizes = _TOPOLOGY_3D if megacore else _TOPOLOGY_2D
        out += [f"{family}-{chips * 2 if megacore else chips}" for chips in sizes]
    return out + ["local"]


def get(name: str) -> Target:
    """The target named ``name`` (``v5litepod-8``, ``v4-32``, ``v6e-16``, ``local``); a
    :class:`TargetError` naming the known ones otherwise."""
    if name in LOCAL_NAMES:
        return _local()
    match = re.fullmatch(r"(v4|v5p|v5litepod|v6e)-(\d+)", name)
    if match is None:
        raise TargetError(f"--target {name!r}: not a TPU type we know; known: {', '.join(names())}")
    family, number = match.group(1), int(match.group(2))
    chip, prefix, host_bounds, megacore = _FAMILIES[family]
    chips = number // 2 if megacore else number  # v4-8 and v5p-8 name TensorCores: 4 chips
    table = _TOPOLOGY_3D if megacore else _TOPOLOGY_2D
    if chips not in table:
        raise TargetError(f"--target {name!r}: no {family} slice of {number}; known: "
                          f"{', '.join(n for n in names() if n.startswith(family + '-'))}")
    # Single-host slices keep all their chips on the host: v5e and v6e up to 8, v4 and v5p 4.
    per_host = 8 if not megacore else 4
    if chips <= per_host:
        bounds = tuple(int(x) for x in (table[chips] + ("" if megacore else "x1")).split("x"))
    else:
        bounds = host_bounds
    hosts = max(1, chips // (bounds[0] * bounds[1] * bounds[2]))
    return Target(name, CHIPS[chip], chips, hosts, f"{prefix}:{table[chips]}", bounds, megacore)
