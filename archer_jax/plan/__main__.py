"""``python -m archer_jax.plan``: runs :func:`archer_jax.plan.command.run`."""

from archer_jax.plan.command import run

run()
