"""What a training run writes and reads back, below everything that runs one.

* :mod:`~archer_jax.records.checkpoint`: orbax checkpoints: networks, optimizer states, replay buffer, loop state.
* :mod:`~archer_jax.records.loop_state`: the training loop's own state: counters, metric history, evaluations, seed.
* :mod:`~archer_jax.records.history`: ``history.jsonl``, a line of metrics per finished iteration.
* :mod:`~archer_jax.records.step_metrics`: per-phase means of the step metrics; the non-finite watchdog.
* :mod:`~archer_jax.records.report`: TensorBoard events (and W&B), the console line, the summary and plot.
* :mod:`~archer_jax.records.progress`: a long phase's progress: a tqdm bar, or a log line every 30 s.
* :mod:`~archer_jax.records.tensorboard_writer`: TensorBoard event files without TensorFlow.
* :mod:`~archer_jax.records.interrupts`: SIGINT/SIGTERM/SIGHUP as a request to save and stop.
* :mod:`~archer_jax.records.workdir_lock`: one run per workdir (``WORKDIR/run.lock``).

The package imports none of them: each module is imported by name.
"""
