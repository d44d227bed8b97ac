"""A network's training state as a pytree, its optimizer, and its shardings over a mesh."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from archer_jax.runtime import sharding as shd

Array = jax.Array


class TrainState(NamedTuple):
    """Parameters, optimizer state and counters of one network.

    ``target`` is the Polyak-averaged copy (the target critic), or None for networks without one.
    ``skipped`` counts optimizer steps skipped because the loss or a gradient was not finite.
    ``frozen`` holds the parameters that are not trained (a LoRA policy's base weights), or None:
    steps read them but never differentiate, update or copy them, and checkpoints leave them out
    (they are the pretrained weights the run loads).
    """

    params: nnx.State
    opt_state: Any
    target: nnx.State | None
    step: Array
    skipped: Array
    frozen: nnx.State | None = None


@dataclasses.dataclass
class States:
    """What an agent trains: the actor and (unless the agent has none) the critic with its target."""

    actor: TrainState
    critic: TrainState | None


def optimizer(learning_rate: float, max_grad_norm: float | None) -> optax.GradientTransformation:
    """Adam on gradients clipped to ``max_grad_norm`` (global norm over this network only).

    ``None`` (for callers of the library only; a run's config always clips) means no clipping; a
    norm of 0 or less is refused rather than silently turning clipping off.
    """
    adam = optax.adam(learning_rate)
    if max_grad_norm is None:
        return adam
    if not (math.isfinite(max_grad_norm) and max_grad_norm > 0):
        raise ValueError(f"max_grad_norm must be finite and > 0 (None = no clipping), got {max_grad_norm}")
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), adam)


def path_names(path) -> tuple[str, ...]:
    """The names along a pytree key path (``('q1', 'out', 'bias', 'value')``)."""
    return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def partitioned_optimizer(learning_rates: dict[str, float], max_grad_norm: float | None,
                          label: Callable[[str], str]) -> optax.GradientTransformation:
    """One :func:`optimizer` per part of a parameter tree (its own learning rate, its own gradient
    clipping), each parameter's part named by ``label(top-level key)``: e.g. PPO's actor, whose
    separate value model trains at the critic's rate."""
    def labels(params):
        return jax.tree_util.tree_map_with_path(lambda path, _: label(path_names(path[:1])[0]), params)

    return optax.multi_transform({part: optimizer(lr, max_grad_norm) for part, lr in learning_rates.items()}, labels)


def split_params(module: nnx.Module) -> tuple[nnx.GraphDef, nnx.State]:
    """(graph, parameters) of ``module``; every variable must be a parameter."""
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    if jax.tree.leaves(rest):
        raise ValueError(f"{type(module).__name__} has non-parameter variables; train states hold parameters only")
    return graphdef, params


def split_trainable(module: nnx.Module) -> tuple[nnx.GraphDef, nnx.State, nnx.State | None]:
    """(graph, trained parameters, frozen state) of ``module``.

    With LoRA adapters (``nnx.LoRAParam``) in ``module.policy``, the policy trains its adapters
    only: its other parameters are frozen, with the adapters' dropout streams (``nnx.RngState``,
    reseeded at every step: :func:`merged`); parameters outside the policy (a value head) train.
    Without adapters every parameter trains and ``frozen`` is None.
    """
    if not jax.tree.leaves(nnx.state(module, nnx.LoRAParam)):
        graphdef, params = split_params(module)
        return graphdef, params, None
    in_policy = nnx.Any(nnx.All(nnx.PathContains("policy"), nnx.Param, nnx.Not(nnx.LoRAParam)), nnx.RngState)
    graphdef, frozen, trained, rest = nnx.split(module, in_policy, nnx.Param, ...)
    if jax.tree.leaves(rest):
        raise ValueError(f"{type(module).__name__} has variables that are neither parameters nor dropout streams")
    return graphdef, trained, frozen


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def merged(graphdef: nnx.GraphDef, params: nnx.State, frozen: nnx.State | None, step: Array | None = None) -> nnx.Module:
    """The module of ``graphdef`` with its trained and (if any) frozen parameters.

    With ``step`` and dropout streams in ``frozen`` (LoRA dropout), the module is in training mode
    and each stream's key is folded with ``step``: fresh masks every optimizer step, the same for a
    given step (a resumed run draws what an uninterrupted one does). Micro-batches of one step share
    the masks' pattern.
    """
    if frozen is None:
        return nnx.merge(graphdef, params)
    keyed = step is not None and any(_is_key(x) for x in jax.tree.leaves(frozen))
    if keyed:
        frozen = jax.tree.map(lambda x: jax.random.fold_in(x, step) if _is_key(x) else x, frozen)
    module = nnx.merge(graphdef, params, frozen)
    return nnx.view(module, only=nnx.Dropout, deterministic=False) if keyed else module


def create(params: nnx.State, tx: optax.GradientTransformation, *, with_target: bool = False) -> TrainState:
    """A fresh state: optimizer initialised, target (if any) equal to the parameters (no frozen
    part: attach one with ``state._replace(frozen=...)``, outside any jit, so it is never copied)."""
    target = jax.tree.map(jnp.copy, params) if with_target else None
    zero = jnp.zeros((), jnp.int32)
    return TrainState(params, tx.init(params), target, zero, zero)


def shardings(state: TrainState, tx: optax.GradientTransformation, mesh: Mesh, rules: shd.Rules) -> TrainState:
    """``NamedSharding``s for ``state``: parameters (and the target and the optimizer's
    per-parameter moments) by their logical axes; counters replicated."""
    param_sh = shd.state_shardings(state.params, mesh, rules)
    scalar = shd.replicated(mesh)
    opt_sh = optax.tree_map_params(
        tx,
        lambda _, sh: sh,
        state.opt_state,
        param_sh,
        transform_non_params=lambda _: scalar,
        is_leaf=lambda x: isinstance(x, (nnx.Variable, NamedSharding)),
    )
    frozen_sh = None if state.frozen is None else shd.state_shardings(state.frozen, mesh, rules)
    return TrainState(param_sh, opt_sh, None if state.target is None else param_sh, scalar, scalar, frozen_sh)
