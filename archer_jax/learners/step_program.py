"""One way to compile a learner step: ``compile_step(step, state_shardings, *inputs)``.

    program = compile_step(step, critic_shardings, critic_batch_shardings, mesh=mesh)
    state, metrics = program(state, batch)                       # run it on arrays
    compiled = program.lower(*abstract(state, batch)).compile()  # or compile it from shapes alone

``step(state, *inputs, micro_batches=n)`` is a pure function of pytrees (its batch the last input);
the program jits it over the shardings given, its state donated and its metrics replicated, with
the batch cut into micro-batches by memory (:class:`StepProgram`; the sizes' rules:
:mod:`archer_jax.learners.micro_batching`). It lowers
from arrays or from :class:`jax.ShapeDtypeStruct`s that carry their shardings (:func:`abstract`),
so a program can be compiled for devices that hold no weights, such as a TPU topology's.
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
from archer_jax.runtime.precision import program_name

log = logging.getLogger(__name__)


def compile_step(step: Callable, state_shardings, *inputs, mesh: Mesh, micro_batch_size: int | str = AUTO,
                 limit: int | None = None) -> StepProgram:
    """``step(state, *inputs)`` jitted over ``state_shardings`` and the inputs' shardings (its state
    donated), returning the new state and replicated metrics; ``micro_batch_size`` and ``limit``
    as :class:`StepProgram`'s."""
    return StepProgram(step, mesh=mesh, micro_batch_size=micro_batch_size, limit=limit, donate_argnums=(0,),
                       in_shardings=(state_shardings, *inputs), out_shardings=(state_shardings, shd.replicated(mesh)))


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
