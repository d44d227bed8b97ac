"""Text environments for ArCHer (DESIGN §2): the protocol, the worker pool and the games."""

from archer_jax.envs.base import Env, EnvError, StepInfo, StepResult

__all__ = ["Env", "EnvError", "StepInfo", "StepResult"]
