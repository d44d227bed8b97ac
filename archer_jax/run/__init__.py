"""A training run's bookkeeping: its command line, its checks, what it saves, records and reports.

* :mod:`~archer_jax.run.cli`: the command line of ``python -m archer_jax.train``: flags, one-line errors.
* :mod:`~archer_jax.run.preflight`: every check of a run's inputs that needs no model, before anything is built.
* :mod:`~archer_jax.run.config_changes`: what a resumed run may change in its config, and how it is recorded.
* :mod:`~archer_jax.run.checkpoint`: orbax checkpoints: networks, optimizer states, replay buffer, loop state.
* :mod:`~archer_jax.run.loop_state`: the training loop's own state: counters, metric history, evaluations, seed.
* :mod:`~archer_jax.run.history`: ``history.jsonl``, a line of metrics per finished iteration.
* :mod:`~archer_jax.run.step_metrics`: per-phase means of the step metrics; the non-finite watchdog.
* :mod:`~archer_jax.run.report`: TensorBoard events (and W&B), the console line, the summary and plot.
* :mod:`~archer_jax.run.tensorboard_writer`: TensorBoard event files without TensorFlow.
* :mod:`~archer_jax.run.interrupts`: SIGINT/SIGTERM/SIGHUP as a request to save and stop.
* :mod:`~archer_jax.run.workdir_lock`: one run per workdir (``WORKDIR/run.lock``).

The package imports none of them: each module is imported by name (they sit in different layers).
"""
