"""archer_jax: ArCHer (hierarchical multi-turn RL for language-model agents) in JAX/Flax.

Importing archer_jax does two things to the process: where no TPU chip is attached and
``JAX_PLATFORMS`` chooses nothing, JAX will not try to start a TPU backend, which with libtpu
installed (the ``tpu`` and ``test`` extras) prints libtpu's start-up errors on every start
(:func:`archer_jax.runtime.xla_flags.quiet_tpu_probe`; a backend already started is left alone), and
transformers' advisory warnings (that PyTorch is missing: it serves tokenizers and configs here)
are off unless ``TRANSFORMERS_NO_ADVISORY_WARNINGS`` says otherwise. The entry
points (``archer_jax.train``, the benchmarks, the test session) set the default XLA flags
themselves (:func:`archer_jax.runtime.xla_flags.set_default_flags`).
"""

import os as _os

from archer_jax.runtime.xla_flags import quiet_tpu_probe as _quiet_tpu_probe

# transformers serves tokenizers and configs here; its advice that PyTorch is missing is not for us.
_os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

_quiet_tpu_probe()

__version__ = "0.1.0"
