"""One way to compile a learner step: ``StepProgram(step, state_shardings, *inputs, mesh=mesh)``.

    program = StepProgram(step, critic_shardings, critic_batch_shardings, mesh=mesh)
    state, metrics = program(state, batch)                       # run it on arrays
    compiled = program.lower(*abstract(state, batch)).compile()  # or compile it from shapes alone

``step(state, *inputs, micro_batches=n)`` is a pure function of pytrees (its batch the last input);
the program calls ``jax.jit`` on it itself, over the shardings given, its state donated and its
metrics replicated, traced under the matmul precision given, with the batch cut into micro-batches
by memory (the sizes' rules: :mod:`archer_jax.learners.micro_batching`). It lowers
from arrays or from :class:`jax.ShapeDtypeStruct`s that carry their shardings (:func:`abstract`),
so a program can be compiled for devices that hold no weights, such as a TPU topology's.

A state's frozen weights (a LoRA policy's base) travel as an argument of their own: the state is
donated (updated in place) but the frozen weights are not, so every reference to them stays valid
and they are never copied.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from archer_jax.errors import ConfigError, TrainingError
from archer_jax.runtime import sharding as shd
from archer_jax.learners.micro_batching import (AUTO, HEADROOM, Layout, candidate_sizes, device_free_bytes, exhausted_bytes,
                                                out_of_memory, parse_micro_batch_size, program_bytes, shares_host_memory,
                                                size_text)
from archer_jax.models.attention import with_batch_shards
from archer_jax.runtime.precision import program_name, traced_with

log = logging.getLogger(__name__)


def abstract(tree, shardings):
    """``tree``'s arrays (or shapes) as :class:`jax.ShapeDtypeStruct`s placed by ``shardings`` (a
    tree whose structure is a prefix of ``tree``'s, or one sharding for every leaf): what a
    program lowers from without any data."""
    def place(sharding, subtree):
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), subtree)

    if isinstance(shardings, jax.sharding.Sharding):
        return place(shardings, tree)
    # The shardings' tree is a prefix of ``tree``'s (a sharding per parameter, whatever wraps it).
    return jax.tree.map(place, shardings, tree, is_leaf=lambda x: x is None or isinstance(x, jax.sharding.Sharding))


def is_abstract(tree) -> bool:
    """Whether ``tree`` holds shapes rather than arrays (a module built under ``nnx.eval_shape``)."""
    return any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves(tree))


def _batch_key(batch) -> tuple:
    return tuple((tuple(leaf.shape), str(leaf.dtype)) for leaf in jax.tree.leaves(batch))


def _describe(batch) -> str:
    if hasattr(batch, "describe"):  # a packed batch says its rows
        return batch.describe()
    shapes = sorted({tuple(leaf.shape[1:]) for leaf in jax.tree.leaves(batch) if leaf.ndim > 1})
    return "lengths " + "/".join(str(s[0]) for s in shapes) if shapes else "no token axes"


def _frozen_apart(step: Callable) -> Callable:
    """``step(state, *rest)`` as ``program(state, frozen, *rest)``: the state's frozen weights an
    argument of their own (not donated), and left out of the state it returns."""
    def program(state, frozen, *rest):
        new, *out = step(state._replace(frozen=frozen), *rest)
        return (new._replace(frozen=None), *out)

    program.__name__ = program_name(step)  # what XLA names the program (not functools.wraps: its
    return program  # __wrapped__ would give jit the step's signature, without ``frozen``


class StepProgram:
    """``step(state, *inputs, micro_batches=n)`` (its batch the last input) jitted over
    ``state_shardings`` and the inputs' shardings, once per micro-batch count, with the count
    chosen per batch shape (see the module docstring); ``micro_batch_size``: "auto" or a size;
    ``limit``: "auto"'s largest micro-batch (None: no limit); ``free_bytes``: the devices' free
    memory (None: :func:`~archer_jax.learners.micro_batching.device_free_bytes`)."""

    def __init__(
        self,
        step: Callable,
        state_shardings,
        *inputs,
        mesh: Mesh,
        micro_batch_size: int | str = AUTO,
        limit: int | None = None,
        matmul_precision: str | None = None,
        free_bytes: Callable[[Sequence[jax.Device]], int | None] | None = None,
    ):
        self.step = traced_with(step, matmul_precision)
        self.name = program_name(step)
        self.mesh = mesh
        self.fixed = parse_micro_batch_size(micro_batch_size)
        self.free_bytes = free_bytes
        self.limit = limit
        self.in_shardings = (state_shardings, *inputs)
        self.out_shardings = (state_shardings, shd.replicated(mesh))
        self.layouts: dict[tuple, Layout] = {}
        self._jitted: dict[int, Callable] = {}
        self._compiled: dict[tuple, jax.stages.Compiled] = {}  # (batch shape, count): what "auto" compiled

    def jitted(self, count: int) -> jax.stages.Wrapped:
        """The step jitted for ``count`` micro-batches (named as the step), called as
        ``jitted(state_without_frozen, frozen, *inputs)``."""
        if count not in self._jitted:
            (state_sh, *rest_sh), (out_state_sh, metrics_sh) = self.in_shardings, self.out_shardings
            step = with_batch_shards(functools.partial(self.step, micro_batches=count), self.mesh)
            self._jitted[count] = jax.jit(
                _frozen_apart(step),
                in_shardings=(state_sh._replace(frozen=None), state_sh.frozen, *rest_sh),
                out_shardings=(out_state_sh._replace(frozen=None), metrics_sh),
                donate_argnums=(0,))
        return self._jitted[count]

    def __call__(self, state, *inputs):
        # With several processes a host's NumPy batch (the same on every host) becomes a global array.
        inputs = (*inputs[:-1], shd.global_arrays(inputs[-1], self.in_shardings[-1]))
        count = self.layout(state, *inputs).count
        new, metrics = self.jitted(count)(state._replace(frozen=None), state.frozen, *inputs)
        return new._replace(frozen=state.frozen), metrics

    def lower(self, *args, count: int | None = None) -> jax.stages.Lowered:
        """The step lowered for ``args`` (arrays or ``ShapeDtypeStruct``s) in its chosen layout
        (``count``: in this many micro-batches instead)."""
        return self._lower(self.layout(*args).count if count is None else count, args)

    def compile(self, *args) -> jax.stages.Compiled:
        """The step compiled for ``args`` (arrays or ``ShapeDtypeStruct``s) in its chosen layout,
        without compiling again what choosing the layout compiled."""
        count = self.layout(*args).count
        key = (_batch_key(args[-1]), count)
        if key not in self._compiled:
            self._compiled[key] = self._lower(count, args).compile()
        return self._compiled[key]

    def _lower(self, count: int, args) -> jax.stages.Lowered:
        state, *inputs = args
        return self.jitted(count).lower(state._replace(frozen=None), state.frozen, *inputs)

    def layout(self, *args) -> Layout:
        """The layout of ``args``' batch shape: chosen (and compiled, for "auto") on first sight."""
        batch = args[-1]
        key = _batch_key(batch)
        if key not in self.layouts:
            self.layouts[key] = self._choose(args)
            chosen = self.layouts[key]
            need = "" if chosen.need_bytes is None else f", {size_text(chosen.need_bytes)} per device"
            free = "" if chosen.free_bytes is None else f" of {size_text(chosen.free_bytes)} free"
            log.info("%s (%s): %d micro-batch(es) of %d %s%s%s", self.name, _describe(batch), chosen.count, chosen.size,
                     getattr(batch, "unit", "transitions"), need, free)
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
                    compiled = self.lower(*args, count=rows // size).compile()
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
            unit = getattr(args[-1], "unit", "transitions")
            packed = ("" if unit == "transitions" else ", fix config.learner.micro_batch_size (a packed step's "
                      f"micro-batches then pack their own transitions) or set config.learner."
                      f"{getattr(args[-1], 'switch', 'pack_critic')}=false")
            raise TrainingError(
                f"{self.name}: micro-batches of {smallest} {unit} ({_describe(args[-1])}) need "
                f"{size_text(needs[smallest])} per device, {size_text(free)} free: set config.model.remat "
                f"(dots or full), shorten config.model.max_prompt_length/max_critic_length{packed}, or use more devices")
        # Memory grows about linearly with the micro-batch: skip the sizes a line through both ends
        # rules out, then compile down from the largest it allows until one fits.
        slope = (needs[largest] - needs[smallest]) / (largest - smallest)
        for size in sizes[1:]:
            if size == smallest or (needs[smallest] + slope * (size - smallest) <= budget and fits(size)):
                return Layout(size, rows // size, needs[size], free)
        raise AssertionError("unreachable: the smallest size fits")
