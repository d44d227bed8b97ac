"""One way to compile a learner step: ``compile_step(step, state_shardings, *inputs)``.

    program = compile_step(step, critic_shardings, critic_batch_shardings, mesh=mesh)
    state, metrics = program(state, batch)                       # run it on arrays
    compiled = program.lower(*abstract(state, batch)).compile()  # or compile it from shapes alone

``step(state, *inputs, micro_batches=n)`` is a pure function of pytrees (its batch the last input);
the program jits it over the shardings given, its state donated and its metrics replicated, with
the batch cut into micro-batches by memory (:mod:`archer_jax.learners.micro_batching`). It lowers
from arrays or from :class:`jax.ShapeDtypeStruct`s that carry their shardings (:func:`abstract`),
so a program can be compiled for devices that hold no weights, such as a TPU topology's.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.sharding import Mesh

from archer_jax import sharding as shd
from archer_jax.learners.micro_batching import AUTO, StepProgram


def compile_step(step: Callable, state_shardings, *inputs, mesh: Mesh, micro_batch_size: int | str = AUTO,
                 limit: int | None = None) -> StepProgram:
    """``step(state, *inputs)`` jitted over ``state_shardings`` and the inputs' shardings (its state
    donated), returning the new state and replicated metrics; ``micro_batch_size`` and ``limit``
    as :class:`~archer_jax.learners.micro_batching.StepProgram`'s."""
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
