"""XLA options archer_jax sets before JAX starts its backends.

XLA:CPU (jax 0.10) hands dots, elementwise ops and reductions to YNNPACK "library fusions" by
default. On our programs they are about twice as slow as XLA's own kernels: the attention
``probs @ V`` dot and the bias-gradient reductions at [32, 4, 256, 256] took ~200 ms each
instead of ~25 ms (benchmarks/README.md, "Speed work"). We turn them off unless the user already
chose a setting in ``XLA_FLAGS``. The option is CPU-only; GPU and TPU programs are unaffected.
The sampler's decode loop is compiled with the fusions on (:data:`DECODE_CPU_OPTIONS`): there
they make decoding faster.

JAX reads ``XLA_FLAGS`` when it creates its first backend, so the entry points call
:func:`set_default_flags` before anything runs on a device: ``python -m archer_jax.train``, the
benchmarks and the test session. Importing archer_jax does not (a library import has no side
effects); in your own program or notebook, call it first thing::

    from archer_jax.runtime import xla_flags
    xla_flags.set_default_flags()   # before the first JAX computation

The entry points also call :func:`quiet_tpu_probe`: JAX tries a TPU backend first and, on a
machine without one, logs ``Unable to initialize backend 'tpu': ... libtpu.so ...`` at INFO level
on every start. The filter drops that record only where no TPU chip is attached; on a machine with
one, a TPU that fails to start is still reported, and every other record passes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from importlib import metadata

CPU_FLAGS = {"xla_cpu_experimental_ynn_fusion_type": ""}  # "" = no YNNPACK fusions

# The sampler's decode loop is the exception: one token per row per step, where YNNPACK's kernels
# are faster (a 32-token generation at 32 rows: 80.2 vs 91.3 ms at tiny size, 6.89 vs 7.39 s at
# GPT-2-124M size; benchmarks/variants.py), so it is compiled with them on CPUs. The prefill, a
# whole prompt at once, is faster without them (the same generation: 81.5 vs 90.1 ms, 6.78 vs
# 7.37 s).
DECODE_CPU_OPTIONS = {
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE,LIBRARY_FUSION_TYPE_REDUCE"
}


# The XLA releases these options were checked against: an XLA that does not know an option
# refuses it (a fatal error for XLA_FLAGS), so other jaxlib versions get XLA's own defaults.
CHECKED_JAXLIB = ("0.10.",)


def options_known() -> bool:
    """Whether the installed jaxlib is one whose XLA has these options."""
    try:
        return metadata.version("jaxlib").startswith(CHECKED_JAXLIB)
    except metadata.PackageNotFoundError:
        return False


def decode_compiler_options(backend: str) -> dict[str, str] | None:
    """XLA options for the sampler's decode loop on ``backend`` (None: the process defaults)."""
    return dict(DECODE_CPU_OPTIONS) if backend == "cpu" and options_known() else None


def set_default_flags(environ=os.environ, known: bool | None = None) -> str:
    """Appends each of :data:`CPU_FLAGS` to ``XLA_FLAGS`` unless it is already there (or the
    installed XLA may not know it: ``known``, default :func:`options_known`); returns the result."""
    flags = environ.get("XLA_FLAGS", "")
    if not (options_known() if known is None else known):
        return flags
    for name, value in CPU_FLAGS.items():
        if name not in flags:
            flags = f"{flags} --{name}={value}".strip()
    environ["XLA_FLAGS"] = flags
    return flags


TPU_PROBE_MESSAGE = "Unable to initialize backend 'tpu'"
JAX_BACKEND_LOGGER = "jax._src.xla_bridge"


@functools.cache
def tpu_attached() -> bool:
    """Whether a TPU chip is attached to this machine (JAX's own PCI probe; True when unknown)."""
    try:
        from jax._src import hardware_utils

        return hardware_utils.num_available_tpu_chips_and_device_id()[0] > 0
    except Exception:  # a JAX without the probe: keep every message
        return True


class NoTpuProbeFilter(logging.Filter):
    """Drops JAX's INFO record of a failed TPU backend start when no TPU chip is attached."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not record.getMessage().startswith(TPU_PROBE_MESSAGE):
            return True
        return tpu_attached()


def quiet_tpu_probe() -> None:
    """Installs :class:`NoTpuProbeFilter` on JAX's backend logger (once), and :func:`skip_absent_tpu`."""
    logger = logging.getLogger(JAX_BACKEND_LOGGER)
    if not any(isinstance(f, NoTpuProbeFilter) for f in logger.filters):
        logger.addFilter(NoTpuProbeFilter())
    skip_absent_tpu()


def skip_absent_tpu(environ=os.environ) -> bool:
    """Where no TPU chip is attached and ``JAX_PLATFORMS`` chooses nothing, JAX does not try to
    start a TPU backend: with libtpu installed (the ``tpu`` extra, which compiles programs for a
    TPU slice on any host) that attempt prints libtpu's warnings to stderr on every start. TPU
    topologies (:mod:`jax.experimental.topologies`) still load libtpu on their own. Call before JAX
    starts its backends; returns whether the TPU backend was skipped."""
    if environ.get("JAX_PLATFORMS") or tpu_attached():
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:  # a JAX without it: nothing to skip
        return False
    registration = xla_bridge._backend_factories.get("tpu")
    if registration is None or xla_bridge.backends_are_initialized():
        return False
    # The platform stays known (TPU lowering rules register against it); its backend just does not start.
    xla_bridge._backend_factories["tpu"] = dataclasses.replace(registration, factory=lambda: None, fail_quietly=True)
    return True
