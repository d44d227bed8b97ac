r"""The training command, and its entry points for Python.

    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    python -m archer_jax.train --config=configs/20q.py --workdir=runs/20q --config.learner.critic_lr=2e-5

The command line is :mod:`archer_jax.run.cli`'s; the loop (:func:`train_and_evaluate`) is
:mod:`archer_jax.run.loop`'s, and the warm starts before it :mod:`archer_jax.run.warm_start`'s.
From Python::

    from archer_jax.train import train_and_evaluate
    summary = train_and_evaluate(config, "runs/20q_tiny")
"""

from __future__ import annotations

from archer_jax.run.loop import build_agent, train_and_evaluate

__all__ = ["build_agent", "train_and_evaluate"]

if __name__ == "__main__":  # python -m archer_jax.train
    from archer_jax.run.cli import run

    run()
