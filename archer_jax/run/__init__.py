"""The top floor: a training run's loop and how it starts, its command line and its checks.

* :mod:`~archer_jax.run.cli`: the command line of ``python -m archer_jax.train``: flags, one-line errors.
* :mod:`~archer_jax.run.preflight`: every check of a run's inputs that needs no model, before anything is built.
* :mod:`~archer_jax.run.config_changes`: what a resumed run may change in its config, and how it is recorded.
* :mod:`~archer_jax.run.loop`: the training loop (``train_and_evaluate``): start or resume, iterate, save, report.
* :mod:`~archer_jax.run.warm_start`: a new run's start: SFT (and its cache), the critic's pretraining,
  ``init_from``, an official critic.

Nothing below imports this package; what a run writes and reads back is :mod:`archer_jax.records`.
"""
