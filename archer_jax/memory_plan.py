"""What each device will hold, printed before the first compilation: the mesh, and per device the
parameters, the optimizer state and the largest activation of a learner step.

    log.info("%s", memory_plan.describe(mesh, states, largest_activation(...)))

Parameters and Adam moments are counted from the states' own shardings (each device's shard).
The largest activation is estimated from the shapes, for the whole step batch in one micro-batch
(the most ``learner.micro_batch_size="auto"`` can choose): the policy's logits over the action
tokens, an attention score matrix, or an MLP's hidden layer, whichever is largest.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from archer_jax.learners.micro_batching import size_text


def device_bytes(tree: Any) -> int:
    """Bytes of one device's shard of every array in ``tree`` (the largest shard where they differ)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        if not hasattr(leaf, "shape") or jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            continue
        shape = leaf.sharding.shard_shape(leaf.shape) if isinstance(leaf, jax.Array) else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


@dataclasses.dataclass(frozen=True)
class Activation:
    """The largest activation tensor a step makes, per device."""

    what: str
    bytes: int


def largest_activation(
    *, rows: int, mesh: Mesh, policy_length: int, action_length: int, vocab: int, policy_width: int,
    policy_heads: int, policy_mlp: int | None = None, critic_length: int = 0, critic_width: int = 0, critic_heads: int = 0, compute_bytes: int = 4,
) -> Activation:
    """The largest of the activations a critic or actor step makes with ``rows`` transitions (the
    step batch), on one device of ``mesh`` (rows split over ``data × fsdp``, heads, vocabulary and
    MLP columns over ``tensor``)."""
    per_device = max(1, rows // (mesh.shape["data"] * mesh.shape["fsdp"]))
    tensor = mesh.shape["tensor"]
    policy_mlp = 4 * policy_width if policy_mlp is None else policy_mlp
    candidates = [
        Activation(f"policy logits ({per_device} rows x {action_length} action tokens x {vocab} vocabulary, float32)",
                   per_device * action_length * -(-vocab // tensor) * 4),
        Activation(f"policy attention scores ({per_device} rows x {policy_heads} heads x {policy_length}^2)",
                   per_device * -(-policy_heads // tensor) * policy_length**2 * compute_bytes),
        Activation(f"policy MLP ({per_device} rows x {policy_length} tokens x {policy_mlp})",
                   per_device * policy_length * -(-policy_mlp // tensor) * compute_bytes),
    ]
    if critic_width:
        candidates += [
            # The target critic embeds s and s' in one pass: twice the rows.
            Activation(f"critic attention scores ({2 * per_device} rows x {critic_heads} heads x {critic_length}^2)",
                       2 * per_device * -(-critic_heads // tensor) * critic_length**2 * compute_bytes),
            Activation(f"critic MLP ({2 * per_device} rows x {critic_length} tokens x {4 * critic_width})",
                       2 * per_device * critic_length * -(-4 * critic_width // tensor) * compute_bytes),
        ]
    return max(candidates, key=lambda a: a.bytes)


def describe(mesh: Mesh, states, activation: Activation | None = None) -> str:
    """One line: the mesh, and per device the parameters (with the target critic), optimizer state
    and largest activation."""
    shape = " ".join(f"{axis}={size}" for axis, size in mesh.shape.items())
    params = opt = 0
    for state in (states.actor, states.critic):
        if state is not None:
            params += device_bytes((state.params, state.target, state.frozen))
            opt += device_bytes(state.opt_state)
    processes = len({d.process_index for d in mesh.devices.flat})
    line = (f"mesh {shape} over {mesh.devices.size} devices ({processes} process{'es' if processes > 1 else ''}); "
            f"per device: parameters {size_text(params)}, optimizer state {size_text(opt)}")
    if activation is not None:
        line += f", largest activation {size_text(activation.bytes)} ({activation.what})"
    return line
