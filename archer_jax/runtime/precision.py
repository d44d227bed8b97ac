"""The precision policy of every jitted program: its compute dtype and its matmul precision.

Parameters, Adam moments, softmax, logits and losses are float32 whatever the policy; the
policy sets what the matrix products compute in.

* ``model.dtype``: ``"auto"`` (the default) computes in bfloat16 on GPUs and TPUs and in float32
  on CPUs; ``"float32"`` and ``"bfloat16"`` force one.
* ``model.matmul_precision`` (:data:`MATMUL_PRECISIONS`), for float32 products:

  ========== ============================== =============================== =====================
  setting    CPU                            GPU (Ampere and newer)          TPU
  ========== ============================== =============================== =====================
  default    float32                        TF32 tensor cores (10-bit       one bfloat16 pass
                                            mantissa inputs)
  high       float32                        TF32 (XLA's choice)             three bfloat16 passes
  highest    float32                        IEEE float32                    float32 (six passes)
  ========== ============================== =============================== =====================

  bfloat16 products are bfloat16 whatever the setting (with float32 accumulation). The parity
  tests pin ``"highest"``, so they hold on every platform.

:func:`traced_with` applies a setting to a function at trace time, so the sampler, the learner's
steps and CHAI's scoring each carry it into their compiled programs (None: the ambient JAX
setting, ``jax.default_matmul_precision``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

MATMUL_PRECISIONS = ("default", "high", "highest")
DTYPES = ("auto", "float32", "bfloat16")
ACCELERATORS = ("gpu", "tpu", "cuda", "rocm")


def compute_dtype(name: str, platform: str | None = None) -> jnp.dtype:
    """The compute dtype named by ``model.dtype`` on ``platform`` (default: JAX's default backend)."""
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    if name == "auto":
        name = "bfloat16" if (platform or jax.default_backend()) in ACCELERATORS else "float32"
    return jnp.dtype(name)


def traced_with(fn: Callable, matmul_precision: str | None) -> Callable:
    """``fn``, traced under ``jax.default_matmul_precision(matmul_precision)`` (None: unchanged)."""
    if matmul_precision is None:
        return fn
    if matmul_precision not in MATMUL_PRECISIONS:
        raise ValueError(f"matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)}, got {matmul_precision!r}")

    def traced(*args, **kwargs):
        with jax.default_matmul_precision(matmul_precision):
            return fn(*args, **kwargs)

    traced.__name__ = program_name(fn)
    return traced


def program_name(fn: Callable) -> str:
    """The name of ``fn``, or of the function a ``functools.partial`` binds (as jit names it)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", "program")
