"""Matmul FLOPs of a traced program, loops multiplied out.

XLA's ``cost_analysis()`` counts the body of a loop once, and a run's learner steps loop: over the
scanned layers of each model and over micro-batches. Counted on the program's jaxpr instead, a
``scan`` counts its body ``length`` times:

    flops = matmul_flops(step, state, batch)     # abstract arguments are enough

Only ``dot_general`` is counted (2 x the output's elements x the contracted size): the matmuls
that bound a transformer step, and what model-FLOPs utilisation measures. A ``while`` loop (a
trip count only known at run time) counts its body once; a ``cond`` its costliest branch. A
Pallas kernel counts its own cost estimate, or else its body once per grid step (every block, as
if none were skipped).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
from jax.extend import core


def _sub_jaxprs(params: dict):
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, core.Jaxpr):
                yield item


def jaxpr_flops(jaxpr: core.Jaxpr) -> float:
    """Matmul FLOPs of ``jaxpr`` (see the module docstring)."""
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in contracting)
        elif name == "scan":
            total += eqn.params["length"] * jaxpr_flops(eqn.params["jaxpr"].jaxpr)
        elif name == "cond":
            total += max(jaxpr_flops(branch.jaxpr) for branch in eqn.params["branches"])
        elif name == "pallas_call":  # a kernel (TPU flash attention): its own estimate, or its body per grid step
            estimate = eqn.params.get("cost_estimate")
            total += estimate.flops if estimate is not None and estimate.flops else \
                math.prod(eqn.params["grid_mapping"].grid) * jaxpr_flops(eqn.params["jaxpr"])
        else:
            total += sum(jaxpr_flops(sub) for sub in _sub_jaxprs(eqn.params))
    return total


def matmul_flops(fn: Callable, *args) -> float:
    """Matmul FLOPs of ``fn(*args)`` (arrays or ``jax.ShapeDtypeStruct``s), loops multiplied out."""
    return jaxpr_flops(jax.make_jaxpr(fn)(*args).jaxpr)
