"""Text environments for ArCHer (docs/algorithms.md, section 12): the protocol, the worker pool and the games."""

from archer_jax.envs.base import Env, EnvError, StepInfo, StepResult

__all__ = ["Env", "EnvError", "StepInfo", "StepResult"]
