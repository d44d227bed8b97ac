"""Device meshes and the mapping from logical axis names to mesh axes.

Parameters carry logical axis names (``vocab``, ``embed``, ``heads``, ``kv_heads``, ``kv``,
``mlp``, ``positions``; see :mod:`archer_jax.models.layers`). A rule table maps each logical name to
mesh axes, so one model definition runs unsharded on one device, data-parallel, FSDP, or
tensor-parallel on a pod slice:

    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    shardings = state_shardings(nnx.state(model), mesh)
    params = jax.device_put(nnx.state(model), shardings)

Mesh axes: ``data`` (batch only), ``fsdp`` (batch and parameter shards), ``tensor``
(attention heads, MLP and vocabulary columns). A dimension whose size is not divisible by its
mesh axes is replicated rather than refused (e.g. GPT-2's 50257-token vocabulary).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from archer_jax.runtime.config_keys import key

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

Rules = Sequence[tuple[str, str | tuple[str, ...] | None]]

DEFAULT_RULES: Rules = (
    ("batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("mlp", "tensor"),
    ("kv", None),
    ("positions", None),
)


# Every parameter whole on every device (the batch still split): a small network beside a large
# sharded one, e.g. the RoBERTa critic beside a 7B policy on an FSDP mesh (config.model.critic_sharding).
REPLICATED_RULES: Rules = tuple((name, BATCH_AXES if name == "batch" else None) for name, _ in DEFAULT_RULES)


def mesh_shape(data: int = -1, fsdp: int = 1, tensor: int = 1, *, num_devices: int) -> dict[str, int]:
    """The ``{data, fsdp, tensor}`` sizes of a mesh over ``num_devices`` devices (``-1`` takes
    what is left), or a one-line ``ValueError`` saying why they do not fit."""
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    free = [name for name, size in sizes.items() if size == -1]
    if len(free) > 1:
        raise ValueError(f"only one mesh axis may be -1, got {free}")
    for name, size in sizes.items():
        if size != -1 and size < 1:
            raise ValueError(f"mesh axis {name!r} must be >= 1 or -1, got {size}")
    fixed = math.prod(size for size in sizes.values() if size != -1)
    given = " x ".join(f"{name}={size}" for name, size in sizes.items())
    if free:
        if num_devices % fixed:
            raise ValueError(f"{num_devices} devices do not divide into mesh axes {given} "
                             f"(the other axes take {fixed} devices per {free[0]} slot)")
        sizes[free[0]] = num_devices // fixed
    elif fixed != num_devices:
        raise ValueError(f"mesh {given} needs {fixed} devices, have {num_devices} "
                         f"(make the axes multiply to {num_devices}, or set one of them to -1)")
    return sizes


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """``config.mesh``: devices per axis, ``-1`` = all the remaining devices (:func:`make_mesh`)."""

    data: int = key(-1, "devices on the data axis (-1 = all remaining devices)")
    fsdp: int = key(1, "devices on the fsdp axis (batch and parameter shards; -1 = all remaining)")
    tensor: int = key(1, "devices on the tensor axis (heads, MLP and vocabulary columns; -1 = all remaining)")

    def __post_init__(self):
        for axis in ("data", "fsdp", "tensor"):
            size = getattr(self, axis)
            if size == 0 or size < -1:
                raise ValueError(f"{axis}: must be -1 (all remaining devices) or >= 1, got {size}")


def make_mesh(
    data: int = -1, fsdp: int = 1, tensor: int = 1, *, devices: Sequence[jax.Device] | None = None
) -> Mesh:
    """A ``(data, fsdp, tensor)`` mesh over ``devices`` (default: all). ``-1`` takes what is left."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = mesh_shape(data, fsdp, tensor, num_devices=len(devices))
    shape = tuple(sizes[name] for name in MESH_AXES)
    return Mesh(np.asarray(devices, dtype=object).reshape(shape), MESH_AXES)


def single_device_mesh() -> Mesh:
    """A 1×1×1 mesh on the first device: the unsharded case with the same code path."""
    return make_mesh(1, 1, 1, devices=jax.devices()[:1])


def _mesh_axes_of(name: str | None, rules: Mapping[str, Any]) -> tuple[str, ...]:
    if name is None:
        return ()
    if name not in rules:
        raise KeyError(f"logical axis {name!r} has no sharding rule; rules cover {sorted(rules)}")
    axes = rules[name]
    if axes is None:
        return ()
    return (axes,) if isinstance(axes, str) else tuple(axes)


def logical_to_mesh(
    names: Sequence[str | None], shape: Sequence[int], mesh: Mesh, rules: Rules = DEFAULT_RULES
) -> PartitionSpec:
    """The mesh partition of an array of ``shape`` whose dimensions have logical ``names``.

    Mesh axes absent from ``mesh``, already used by an earlier dimension, or not dividing the
    dimension's size are dropped (that dimension is then replicated over them).
    """
    if len(names) != len(shape):
        raise ValueError(f"logical axes {tuple(names)} do not match an array of shape {tuple(shape)}")
    table = dict(rules)
    used: set[str] = set()
    spec = []
    for name, size in zip(names, shape):
        axes = []
        for axis in _mesh_axes_of(name, table):
            if axis in used or axis not in mesh.shape:
                continue
            if size % (math.prod(mesh.shape[a] for a in axes) * mesh.shape[axis]):
                continue
            axes.append(axis)
        used.update(axes)
        spec.append(None if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    return PartitionSpec(*spec)


def state_shardings(state: nnx.State, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> nnx.State:
    """A ``NamedSharding`` for every variable of ``state``, from its logical axis names.

    Variables without logical names (scalars, counters) are replicated.
    """

    def sharding_of(variable: nnx.Variable) -> NamedSharding:
        names = variable.get_metadata().get("out_sharding") or variable.get_metadata().get("sharding_names")
        value = variable.get_value()
        shape = value.shape if hasattr(value, "shape") else np.shape(value)
        if not names:
            return NamedSharding(mesh, PartitionSpec())
        return NamedSharding(mesh, logical_to_mesh(names, shape, mesh, rules))

    return jax.tree.map(sharding_of, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def batch_size_multiple(mesh: Mesh | None) -> int:
    """Batch sizes must be multiples of this: the product of the mesh's batch axes."""
    if mesh is None:
        return 1
    return math.prod(mesh.shape.get(axis, 1) for axis in BATCH_AXES)


def batch_sharding(mesh: Mesh, ndim: int = 2, batch_dim: int = 0) -> NamedSharding:
    """Dimension ``batch_dim`` split over the data axes, the rest replicated."""
    spec = [None] * ndim
    spec[batch_dim] = tuple(a for a in BATCH_AXES if a in mesh.shape)
    return NamedSharding(mesh, PartitionSpec(*spec))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


# ---- several processes ----------------------------------------------------------------------
# With several processes (hosts), a run's mesh spans every host's devices, and the sampler runs on
# this host's devices alone (each host plays its own games): see archer_jax.runtime.distributed.


def local_mesh(mesh: Mesh, process: int | None = None) -> Mesh:
    """``mesh`` itself when one process holds all its devices; else a mesh over this process's
    devices (or ``process``'s: a plan's host of a slice) with the same axes (``fsdp`` and
    ``tensor`` kept where they fit in one host, the rest on ``data``)."""
    process = jax.process_index() if process is None else process
    devices = [d for d in mesh.devices.flat if d.process_index == process]
    if len(devices) == mesh.devices.size:
        return mesh
    tensor = math.gcd(mesh.shape["tensor"], len(devices))
    fsdp = math.gcd(mesh.shape["fsdp"], len(devices) // tensor)
    return make_mesh(len(devices) // (tensor * fsdp), fsdp, tensor, devices=devices)


def localize(tree: Any, mesh: Mesh) -> Any:
    """Arrays of a multi-process mesh as whole copies on ``mesh`` (this process's devices,
    :func:`local_mesh`), e.g. the policy's parameters for this host's sampler. An array sharded
    across hosts is gathered first (on device); a replicated one is only re-wrapped. A single
    process's arrays are returned as they are."""
    if jax.process_count() == 1:
        return tree
    replicated = NamedSharding(mesh, PartitionSpec())

    def local(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return jax.device_put(x, replicated)
        if not x.sharding.is_fully_replicated:
            x = jax.jit(lambda a: a, out_shardings=NamedSharding(x.sharding.mesh, PartitionSpec()))(x)
        shards = {shard.device: shard.data for shard in x.addressable_shards}
        return jax.make_array_from_single_device_arrays(x.shape, replicated, [shards[d] for d in mesh.devices.flat])

    return jax.tree.map(local, tree)


def global_arrays(tree: Any, shardings: Any) -> Any:
    """Host NumPy arrays (the same values on every process) as global arrays with ``shardings``
    (one per leaf, or one for all); in a single process they are returned as they are, for
    ``jax.jit`` to place."""
    if jax.process_count() == 1:
        return tree
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree.map(lambda _: shardings, tree)

    def place(x, sharding):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(place, tree, shardings)
