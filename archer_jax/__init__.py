"""archer_jax: ArCHer (hierarchical multi-turn RL for language-model agents) in JAX/Flax."""

__version__ = "0.1.0"
