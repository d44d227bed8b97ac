r"""Trains an agent (ArCHer, CHAI, filtered BC: ``config.agent``): ``python -m archer_jax.train --config=... --workdir=...``.

    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    python -m archer_jax.train --config=configs/20q.py --workdir=runs/20q --config.learner.critic_lr=2e-5

The loop (ArCHer, Zhou et al. 2024, Algorithm 1, online), in :func:`train_and_evaluate`:

    optional SFT warm start on demonstrations; greedy eval ("before")
    for iteration = 1 .. iterations:
        roll out rollout_size dialogues with the agent (env worker pool + jitted sampler)
        add their transitions to the replay buffer
        agent.learn: ArCHer: critic_steps TD steps on uniform batches with a fresh a_pi ~ pi(.|s)
            (Polyak inside); after warmup_iter, actor_steps policy-gradient steps with
            A = min Q(s, a_pi) - min V(s)   (archer_jax/agents/*.py, archer_jax/learners/archer.py)
        every eval_freq: greedy eval; every save_freq: checkpoint
    summary.json, learning_curve.png

A workdir that already holds a checkpoint is resumed from its latest complete one, exactly.

Several hosts (a TPU pod slice, or ``--coordinator/--num_processes/--process_id`` on every host)
run the same command; each plays its share of the games and the learner steps span every host's
devices (:mod:`archer_jax.distributed`, ``docs/multihost.md``). The primary host writes the reports.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections

from archer_jax import agents, distributed, memory_plan, report, rollout, sft
from archer_jax.agents.agent import timed
from archer_jax.agents.rollouts import collect, evaluate, store
from archer_jax.checkpoint import Checkpoints
from archer_jax.components import Components
from archer_jax.config import validate
from archer_jax.errors import TrainingError
from archer_jax.learners.train_state import States
from archer_jax.loop_state import LoopState

log = logging.getLogger("archer_jax")

def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path) -> dict[str, Any]:
    """Trains (or resumes) the run in ``workdir``; returns the summary written to summary.json."""
    from archer_jax import preflight

    preflight.check(config, workdir)  # validate(config), then every check that needs no model
    _use_compilation_cache(config.compilation_cache)
    workdir = Path(workdir).expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    if distributed.is_primary():
        _record_config(config, workdir)
    c, started = config, time.time()
    run = Components(c, workdir)
    agent = run.agent
    checkpoints = Checkpoints(workdir / "checkpoints", keep=c.keep_checkpoints)
    writers = report.Writers(workdir, use_wandb=c.use_wandb, wandb_project=c.wandb_project, config=c.to_dict())
    loop = None
    try:
        states, replay, loop = _start_or_resume(run, agent, checkpoints, writers, started)
        resumed_at, session_start = loop.iteration, time.time() - loop.wall_time_s

        for iteration in range(loop.iteration + 1, c.iterations + 1):
            t0 = time.perf_counter()
            episodes, t_rollout = timed(collect, run, agent, states, iteration)  # roll out with the agent
            loop.env_samples += store(run, replay, episodes, loop.episodes)  # into the replay buffer
            loop.episodes += len(episodes)
            states, seconds = agent.learn(run, states, replay, iteration)  # critic, actor or BC steps
            evaluation = None
            if (c.eval_freq and iteration % c.eval_freq == 0) or iteration == c.iterations:
                evaluation = timed(evaluate, run, agent, states)  # greedy, on fixed games
            seconds = dict(rollout=t_rollout, **seconds)
            _record_iteration(run, loop, writers, iteration, episodes, replay, evaluation, seconds, t0)
            if iteration % c.save_freq == 0 or iteration == c.iterations:
                loop.wall_time_s = time.time() - session_start
                _save(checkpoints, iteration, states, replay, loop)
    except TrainingError as e:
        latest = checkpoints.latest()
        kept = f"the last checkpoint (step {latest}) is intact" if latest is not None else "no checkpoint was written"
        stopped = "before training" if loop is None else f"at iteration {loop.iteration + 1}"
        raise TrainingError(f"stopped {stopped}: {e}; {kept}") from None
    finally:
        run.close()
        writers.close()
    return _finish(c, workdir, loop, resumed_at)


def _start_or_resume(run: Components, agent: agents.Agent, checkpoints: Checkpoints, writers: report.Writers,
                     started: float) -> tuple[States, Any, LoopState]:
    """The latest checkpoint's states, replay buffer and loop state; or, in a new workdir, fresh
    ones after the SFT warm start and the "before" evaluation (saved as checkpoint 0)."""
    c = run.config
    states = run.init_states()
    log.info("%s", memory_plan.describe(run.mesh, states, run.largest_activation()))
    latest = checkpoints.latest()
    if latest is not None:
        actor, critic, replay, loop = checkpoints.restore(latest, actor=states.actor, critic=states.critic)
        loop = LoopState.from_json(loop)
        log.info("resumed from %s at iteration %d (%d env samples)", checkpoints.directory / str(latest),
                 loop.iteration, loop.env_samples)
        return States(actor, critic), replay, loop
    replay = run.new_replay()
    loop = LoopState(seed=c.seed, rng=jax.random.key_data(run.key).tolist())
    writers.hparams(c.to_dict())
    if c.sft.steps:
        states, loop.sft = warm_start(run, states, writers)
    before = _eval_metrics(evaluate(run, agent, states))
    loop.evals.append(dict(iteration=0, env_samples=0, **before))
    writers.scalars(0, before)
    log.info("before training: eval return %.3f, success %.2f", before["eval/return"], before["eval/success"])
    loop.wall_time_s = time.time() - started
    _save(checkpoints, 0, states, replay, loop)
    return states, replay, loop


def _record_iteration(run: Components, loop: LoopState, writers: report.Writers, iteration: int, episodes, replay,
                      evaluation: tuple | None, seconds: dict[str, float], start: float) -> None:
    """The iteration's metrics (rollouts, step means, counters, evaluation, phase times) into the
    loop's history, TensorBoard and the console."""
    c = run.config
    metrics = {f"rollout/{k}": v for k, v in rollout.summarize(episodes).items()}
    metrics.update(run.watchdog.means())
    metrics.update(env_samples=loop.env_samples, episodes=loop.episodes, replay_size=len(replay))
    if evaluation is not None:
        evaluated = _eval_metrics(evaluation[0])
        metrics.update(evaluated, **{"time/eval": evaluation[1]})
        loop.evals.append(dict(iteration=iteration, env_samples=loop.env_samples, **evaluated))
    metrics.update({f"time/{k}": v for k, v in seconds.items()}, **{"time/iteration": time.perf_counter() - start})
    loop.history.append(dict(iteration=iteration, **metrics))
    loop.iteration = iteration
    writers.scalars(iteration, metrics)
    log.info("%s", report.console_line(iteration, c.iterations, metrics))


def _save(checkpoints: Checkpoints, step: int, states: States, replay, loop: LoopState) -> None:
    if distributed.multiprocess():  # every host must hold the same replicated parameters
        loop.host_digests[str(step)] = distributed.assert_hosts_agree(states, f"parameters at iteration {step}")
    checkpoints.save(step, actor=states.actor, critic=states.critic, replay=replay, loop=loop.to_json())


def warm_start(run: Components, states: States, writers: report.Writers) -> tuple[States, dict[str, Any]]:
    """SFT on the demonstrations of ``config.sft.data``; the actor's Adam starts fresh after it."""
    from tqdm.auto import tqdm

    c = run.config
    observations, actions = sft.demonstrations(c)
    learner = run.sft_learner()
    start = time.perf_counter()
    with tqdm(total=c.sft.steps, desc="SFT", unit="step", leave=False, disable=None) as bar:

        def progress(step: int, metrics: dict) -> None:
            bar.update(1)
            bar.set_postfix(loss=f"{metrics['loss']:.3f}")

        actor, history = sft.train(learner, learner.init_actor(), run.pipeline, observations, actions,
                                   steps=c.sft.steps, batch_size=c.sft.batch_size, seed=c.sft.seed, progress=progress)
    skipped = sum(m["nonfinite"] for m in history)
    if skipped == len(history):
        raise TrainingError(f"SFT: all {skipped} steps had a non-finite loss or gradient")
    for step in range(0, len(history), max(1, len(history) // 50)):  # tags sft/*, steps 1..sft.steps
        writers.scalars(step + 1, {f"sft/{k}": v for k, v in history[step].items()})
    info = dict(
        pairs=len(observations), steps=c.sft.steps, first_loss=history[0]["loss"], last_loss=history[-1]["loss"],
        skipped=skipped, seconds=time.perf_counter() - start,
    )
    log.info("SFT: %d steps on %d pairs (%s), loss %.3f -> %.3f, %.1f s", c.sft.steps, len(observations),
             c.sft.data, info["first_loss"], info["last_loss"], info["seconds"])
    return States(run.learner.init_actor(actor.params), states.critic), info


def _eval_metrics(episodes) -> dict[str, float]:
    return {f"eval/{k}": v for k, v in rollout.summarize(episodes).items()}


def _record_config(config: ml_collections.ConfigDict, workdir: Path) -> None:
    """Writes ``config.json``; on resume, logs the keys that changed since the run began."""
    path = workdir / "config.json"
    current = json.loads(config.to_json_best_effort())
    if path.is_file():
        before = json.loads(path.read_text())
        changed = sorted(k for k in set(before) | set(current) if before.get(k) != current.get(k))
        if changed:
            log.warning("resuming with changed config keys: %s", ", ".join(changed))
    path.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")


def _use_compilation_cache(directory: str) -> None:
    """Turns on JAX's persistent compilation cache in ``directory`` unless one is already set, for
    every program (JAX keeps only those that took a second or more to compile unless told)."""
    if directory and not jax.config.jax_compilation_cache_dir:
        path = Path(directory).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(path))
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _finish(c: ml_collections.ConfigDict, workdir: Path, loop: LoopState, resumed_at: int) -> dict[str, Any]:
    """summary.json, learning_curve.png and history.jsonl from the loop state."""
    evals = loop.evals
    summary = dict(
        config=json.loads(c.to_json_best_effort()),
        agent=c.agent,
        env=c.env.name,
        iterations=loop.iteration,
        env_samples=loop.env_samples,
        episodes=loop.episodes,
        eval_return_before=evals[0]["eval/return"],
        eval_success_before=evals[0]["eval/success"],
        eval_return_after=evals[-1]["eval/return"],
        eval_success_after=evals[-1]["eval/success"],
        evals=evals,
        sft=loop.sft,
        wall_time_s=loop.wall_time_s,
        resumed_at_iteration=resumed_at or None,
    )
    if not distributed.is_primary():  # every host holds the same loop state; one writes it
        return summary
    report.write_summary(workdir, summary)
    report.plot_learning_curve(workdir, evals, f"{c.agent} on {c.env.name}")
    with (workdir / report.HISTORY).open("w") as f:
        for row in loop.history:
            f.write(json.dumps(row) + "\n")
    log.info("eval return %.3f -> %.3f (success %.2f -> %.2f); wrote %s and %s", summary["eval_return_before"],
             summary["eval_return_after"], summary["eval_success_before"], summary["eval_success_after"],
             workdir / report.SUMMARY, workdir / report.CURVE)
    return summary


if __name__ == "__main__":  # python -m archer_jax.train
    from archer_jax.cli import run

    run()
