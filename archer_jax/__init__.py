"""archer_jax: ArCHer (hierarchical multi-turn RL for language-model agents) in JAX/Flax."""

from archer_jax.xla_flags import set_default_flags as _set_default_flags

_set_default_flags()

__version__ = "0.1.0"
