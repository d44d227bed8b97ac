"""archer_jax: ArCHer (hierarchical multi-turn RL for language-model agents) in JAX/Flax.

Importing archer_jax changes nothing in the process: the entry points (``archer_jax.train``,
the benchmarks, the test session) set the default XLA flags themselves
(:func:`archer_jax.xla_flags.set_default_flags`).
"""

__version__ = "0.1.0"
