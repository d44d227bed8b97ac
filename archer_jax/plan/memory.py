"""What each device will hold, printed before the first compilation: the mesh, and per device the
parameters (with the target critic) and the optimizer state.

    log.info("%s", memory.describe(mesh, states))

They are counted from the states' own shardings (each device's shard). What a learner step needs
beyond them comes from its compiled program, not from shapes: each step logs it when it is first
compiled (``critic_step (lengths 128/32): 1 micro-batch(es) of 256 transitions, 9.1 GiB per
device of 70.2 GiB free``), and ``python -m archer_jax.plan`` gives every program's before a run.
An estimate from the shapes (the largest single activation tensor) was printed here before; at
the paper's critic step on a v5e chip it said 0.4 GB where XLA's temporaries are 6.6 GiB (every
layer's activations are kept for the backward pass), so it is gone.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from archer_jax.learners.micro_batching import size_text


def device_bytes(tree: Any) -> int:
    """Bytes of one device's shard of every array (or ``jax.ShapeDtypeStruct`` with a sharding) in ``tree``."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        if not hasattr(leaf, "shape") or jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            continue
        sharding = getattr(leaf, "sharding", None)  # arrays, and shapes placed for a plan
        shape = sharding.shard_shape(leaf.shape) if sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def describe(mesh: Mesh, states) -> str:
    """One line: the mesh, and per device the parameters (with the target critic) and optimizer state."""
    shape = " ".join(f"{axis}={size}" for axis, size in mesh.shape.items())
    params = opt = 0
    for state in (states.actor, states.critic):
        if state is not None:
            params += device_bytes((state.params, state.target, state.frozen))
            opt += device_bytes(state.opt_state)
    processes = len({d.process_index for d in mesh.devices.flat})
    line = (f"mesh {shape} over {mesh.devices.size} devices ({processes} process{'es' if processes > 1 else ''}); "
            f"per device: parameters {size_text(params)}, optimizer state {size_text(opt)}")
    return line
