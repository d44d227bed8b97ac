r"""Trains an agent (``config.agent``: ArCHer, CHAI, filtered BC, PPO/GRPO, offline ArCHer/BC).

    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    python -m archer_jax.train --config=configs/20q.py --workdir=runs/20q --config.learner.critic_lr=2e-5

The loop (ArCHer, Zhou et al. 2024, Algorithm 1, online), in :func:`train_and_evaluate`:

    optional SFT warm start on demonstrations, or another run's networks (init_from); greedy eval ("before")
    for iteration = 1 .. iterations:
        roll out rollout_size dialogues with the agent (env worker pool + jitted sampler)
        add their transitions to the replay buffer   (offline agents: neither; their dataset is the buffer)
        agent.learn: ArCHer: critic_steps TD steps on uniform batches with a fresh a_pi ~ pi(.|s)
            (Polyak inside); after warmup_iter, actor_steps policy-gradient steps with
            A = min Q(s, a_pi) - min V(s)   (archer_jax/agents/*.py, archer_jax/learners/archer.py);
            PPO: its epochs over the newest rollout; filtered BC: BC steps on the best dialogues
        every eval_freq: greedy eval; every save_freq: checkpoint (never after a non-finite step)
    summary.json, learning_curve.png (history.jsonl grows by a line per iteration)

With ``rollout.staleness=1`` the rollout of iteration k+1 is played in a background thread with a
copy of the policy after iteration k-1 while iteration k learns, and is stored before iteration
k's checkpoint (:class:`archer_jax.rollout.AheadRollout`); ``loop.collected`` says which
rollouts the replay buffer holds.

A workdir that already holds a checkpoint is resumed from its newest one that loads, exactly; a
changed config is applied or refused as :mod:`archer_jax.run.config_changes` says. SIGINT/SIGTERM/
SIGHUP save a checkpoint and stop; every stop (a signal, non-finite losses, an error) writes the reports.

Several hosts (a TPU pod slice, or ``--coordinator/--num_processes/--process_id`` on every host)
run the same command; each plays its share of the games and the learner steps span every host's
devices (:mod:`archer_jax.runtime.distributed`, ``docs/multihost.md``). The primary host writes the reports.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from archer_jax import agents, rollout
from archer_jax.agents.agent import Agent, timed
from archer_jax.config import MICRO, RunConfig
from archer_jax.errors import CheckpointWriteError, ConfigError, RunInterrupted, TrainingError, one_line
from archer_jax.learners.train_state import States
from archer_jax.parts import Parts
from archer_jax.plan import memory as memory_plan
from archer_jax.records import history, report
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.records.interrupts import Interrupted, Interrupts
from archer_jax.records.loop_state import LoopState, nonfinite_steps
from archer_jax.records.workdir_lock import WorkdirLock
from archer_jax.run import config_changes, preflight, warm_start
from archer_jax.runtime import distributed

log = logging.getLogger("archer_jax")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path, *,
                       allow_config_changes: bool = False) -> dict[str, Any]:
    """Trains (or resumes) the run in ``workdir``; returns the summary written to summary.json.

    A resume may change the config only as :mod:`archer_jax.run.config_changes` allows (other keys
    need ``allow_config_changes``). SIGINT/SIGTERM/SIGHUP stop the run with a checkpoint
    (:mod:`archer_jax.records.interrupts`), raising :class:`RunInterrupted`; every stop writes the reports.
    """
    run = preflight.check(config, workdir)  # validate(config): the typed config; every check that needs no model
    _use_compilation_cache(run.compilation_cache)
    workdir = Path(workdir).expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    with WorkdirLock(workdir):  # one run per workdir; a second one is refused in one line
        return _train(run, workdir, allow_config_changes)


def _train(config: RunConfig, workdir: Path, allow_config_changes: bool) -> dict[str, Any]:
    c, started = config, time.time()
    checkpoints = Checkpoints(workdir / "checkpoints", keep=c.keep_checkpoints)
    changes = _config_changes(config, workdir, checkpoints, allow_config_changes)
    agent = build_agent(c, workdir)
    parts = agent.parts
    writers = report.Writers(workdir, use_wandb=c.use_wandb, wandb_project=c.wandb_project, config=c.source.to_dict())
    loop, resumed_at, stop = None, 0, None
    with Interrupts() as interrupts:
        try:
            with interrupts.abandonable():  # a stop before checkpoint 0 (or a resume) keeps nothing new
                states, replay, loop = _start_or_resume(agent, checkpoints, writers, started)
            resumed_at, session_start = loop.iteration, time.time() - loop.wall_time_s
            if changes:
                loop.config_changes.append(dict(iteration=loop.iteration, changes={k: list(v) for k, v in changes.items()}))
            progress = report.Progress(c.iterations, done=loop.iteration)  # the ETA in each iteration's line

            for iteration in range(loop.iteration + 1, c.iterations + 1):
                t0 = time.perf_counter()
                episodes, t_rollout = [], 0.0  # an offline agent learns from its dataset; envs only evaluate it
                ahead, t_ahead = None, None
                if agent.learns_from_rollouts:
                    if loop.collected < iteration:  # serial; one ahead: its first iteration, or a resume before it
                        try:
                            with interrupts.abandonable():  # nothing is kept of a rollout cut short
                                episodes, t_rollout = timed(rollout.collect, parts, agent.act, states, iteration)
                        except Interrupted:
                            break
                        _store(parts, replay, loop, episodes, iteration)  # into the replay buffer
                    if c.rollout.staleness and iteration < c.iterations:  # the next one, while this one learns
                        ahead = rollout.AheadRollout(parts, agent.act, states, iteration + 1)
                try:
                    states, seconds = agent.learn(states, replay, iteration)  # critic, actor or BC steps
                    if ahead is not None:  # finished, not abandoned: the checkpoint holds it (an exact resume)
                        more, t_ahead = timed(ahead.result)
                        _store(parts, replay, loop, more, iteration + 1)
                        episodes = episodes + more
                        ahead = None
                finally:
                    if ahead is not None:  # an error or a second signal: stop the rollout before leaving
                        ahead.abandon()
                parts.metrics.check()  # the steps' metrics, fetched once: stops after too many non-finite steps
                evaluation = None
                if (c.eval_freq and iteration % c.eval_freq == 0) or iteration == c.iterations:
                    evaluation = timed(_evaluate, parts, agent.act, states, writers, iteration)  # greedy (and sampled)
                seconds = dict(rollout=t_rollout, **seconds)
                if t_ahead is not None:  # what the learner waited for the rollout played beside it
                    seconds["rollout_wait"] = t_ahead
                _record_iteration(parts, loop, writers, progress, iteration, episodes, replay, evaluation, seconds, t0)
                stopping = interrupts.stop_requested()
                if (c.save_freq and iteration % c.save_freq == 0) or iteration == c.iterations or stopping:
                    _save_if_finite(checkpoints, states, replay, loop, session_start)
                if stopping:
                    break
            if not interrupts.stop_requested() and checkpoints.latest() != loop.iteration:
                stop = TrainingError(_unsaved(loop, checkpoints))  # its last iterations diverged: not finished
            if interrupts.stop_requested():  # SIGINT/SIGTERM/SIGHUP: the last whole iteration is saved
                if checkpoints.latest() != loop.iteration:  # a rollout was cut short: the one before
                    _save_if_finite(checkpoints, states, replay, loop, session_start)
                stop = RunInterrupted(interrupts.requested, _interrupted(interrupts.requested, loop, checkpoints))
        except Interrupted as e:  # a second signal, or a first one before checkpoint 0: stop at once
            stop = RunInterrupted(e.signal_name, _interrupted(e.signal_name, loop, checkpoints, at_once=True))
        except CheckpointWriteError as e:  # the iteration itself finished
            stop = CheckpointWriteError(f"stopped {_after(loop)}: {e}; {_intact(checkpoints)}")
        except TrainingError as e:
            stop = TrainingError(f"stopped {_where(loop)}: {e}; {_kept(loop, checkpoints)}")
        except Exception as e:  # several hosts: another one died, and the exchange with it broke
            lost = distributed.lost_host(e)
            if lost is None and workdir.is_dir():
                raise
            if lost is None:  # deleted, or its file system unmounted, under the run
                stop = TrainingError(f"stopped {_where(loop)}: the workdir {workdir} is gone (deleted or unmounted "
                                     f"during the run: {one_line(e)}); nothing more could be saved there")
            else:
                stop = distributed.HostLost(f"{lost} {_where(loop)}; {_resumes(checkpoints)}")
        finally:
            parts.close()
            writers.close()
            if loop is not None and workdir.is_dir():  # every stop writes the reports of what was done
                error = sys.exc_info()[1]  # an error no handler above turned into a stop
                failing = stop is not None or error is not None
                why = str(stop) if stop is not None else f"stopped {_where(loop)} by an error: {one_line(error)}"
                try:
                    summary = _finish(c, workdir, loop, resumed_at, stopped=why if failing else None)
                except Exception:
                    if not failing:
                        raise
                    log.exception("the reports of the stopped run could not be written")
    if stop is not None:
        raise stop from None
    return summary


def _config_changes(config: RunConfig, workdir: Path, checkpoints: Checkpoints,
                    allow: bool) -> config_changes.Changes:
    """The config changes a resume applies (refused with a :class:`ConfigError` as
    :mod:`archer_jax.run.config_changes` says); writes config.json, the config in use."""
    changes: config_changes.Changes = {}
    latest = checkpoints.latest()
    if latest is not None:
        before = config_changes.recorded(workdir)
        if before is None:
            log.warning("%s has checkpoints but no readable config.json: only the seed, agent and env its checkpoint "
                        "records are compared", workdir)
        else:
            changes = config_changes.check_resume(config_changes.diff(before, config_changes.as_json(config.source)), workdir,
                                                  allow)
            if changes:
                log.warning("resuming with changed config keys: %s", ", ".join(changes))
        _check_checkpoint_record(config, workdir, checkpoints, latest)  # config.json gone, or not that run's
    if distributed.is_primary():
        config_changes.record(workdir, config.source)
    return changes


def _check_checkpoint_record(config: RunConfig, workdir: Path, checkpoints: Checkpoints,
                             step: int) -> None:
    """Refuses a config whose seed, agent or env is not the one checkpoint ``step`` records (whatever
    config.json says, or when it is gone)."""
    record = checkpoints.loop_record(step)
    try:
        mismatches = LoopState.from_json(record).mismatches(config) if record is not None else []
    except (TypeError, KeyError):
        mismatches = []  # a loop state that does not parse: the restore skips that checkpoint
    if mismatches:
        raise ConfigError(f"--workdir {workdir}: checkpoint {step} there is another run's ({'; '.join(mismatches)}); "
                          "use another --workdir, or the config that run was trained with")


def _where(loop: LoopState | None) -> str:
    return "before training" if loop is None else f"at iteration {loop.iteration + 1}"


def _after(loop: LoopState | None) -> str:
    return "before training" if loop is None else f"after iteration {loop.iteration}"


def _intact(checkpoints: Checkpoints) -> str:
    latest = checkpoints.latest()
    if latest is None:
        return "no checkpoint was written, so the same command starts afresh"
    return f"checkpoint {latest} is intact: make room (or fix the path) and the same command resumes from it"


def _kept(loop: LoopState | None, checkpoints: Checkpoints) -> str:
    """What a stopped run keeps: its last finite iteration and its newest checkpoint."""
    latest = checkpoints.latest()
    kept = f"checkpoint {latest} is intact" if latest is not None else "no checkpoint was written"
    if loop is None:
        return kept
    return f"the last iteration whose steps were all finite is {loop.last_finite_iteration()}; {kept}"


def _unsaved(loop: LoopState, checkpoints: Checkpoints) -> str:
    """The one line of a run whose last iterations had non-finite learner steps, so were not saved."""
    latest = checkpoints.latest()
    bad = [row for row in loop.history if (latest is None or row["iteration"] > latest) and nonfinite_steps(row)]
    steps = sum(nonfinite_steps(row) for row in bad)
    return (f"stopped after iteration {loop.iteration}: {steps:g} learner steps of iteration(s) "
            f"{', '.join(str(row['iteration']) for row in bad)} had a non-finite loss or gradient (each was skipped), so no checkpoint was "
            f"written after them; {_kept(loop, checkpoints)}, and the same command trains again from it")


def _resumes(checkpoints: Checkpoints) -> str:
    """Where the same command on every host resumes a run that lost a host."""
    latest = checkpoints.latest()
    if latest is None:
        return "no checkpoint was written, so the same command on every host starts afresh"
    return f"checkpoint {latest} is intact: the same command on every host resumes from it"


def _interrupted(signal_name: str, loop: LoopState | None, checkpoints: Checkpoints, at_once: bool = False) -> str:
    """The one line of a run stopped by a signal."""
    latest = checkpoints.latest()
    if latest is None:
        return f"{signal_name}: stopped {_where(loop)}; no checkpoint was written, so the same command starts afresh"
    if at_once:
        return f"{signal_name}: stopped at once {_where(loop)}; checkpoint {latest} is intact and the same command resumes from it"
    return f"{signal_name}: stopped after iteration {loop.iteration}; the same command resumes from checkpoint {latest}"


def build_agent(config: RunConfig, workdir: Path) -> Agent:
    """The run's agent (``config.agent``) on the shared parts built for it: its config
    (``config.algorithm``), the networks it asks for, its compiled steps."""
    if not isinstance(config, RunConfig):
        raise TypeError(f"build_agent takes the RunConfig that archer_jax.config.validate returns, not a "
                        f"{type(config).__name__}: build_agent(validate(config), workdir)")
    agent_class = agents.get(config.agent)
    agent_config = config.algorithm
    parts = Parts(config, workdir, agent_class.networks_for(agent_config))
    try:
        return agent_class(parts, agent_config)
    except BaseException:
        parts.close()  # its env workers
        raise


def _start_or_resume(agent: Agent, checkpoints: Checkpoints, writers: report.Writers,
                     started: float) -> tuple[States, Any, LoopState]:
    """The newest checkpoint that loads (its states, replay buffer and loop state); or, in a new
    workdir, fresh ones after the SFT warm start and the "before" evaluation (checkpoint 0)."""
    parts = agent.parts
    c = parts.config
    states = agent.init_states()
    log.info("%s", memory_plan.describe(parts.mesh, states))
    found = checkpoints.restore_latest(actor=states.actor, critic=states.critic,
                                       check=lambda restored: LoopState.from_json(restored[3]))
    if found is not None:
        step, (actor, critic, replay, loop) = found
        loop = LoopState.from_json(loop)
        log.info("resumed from %s at iteration %d (%d env samples)", checkpoints.directory / str(step),
                 loop.iteration, loop.env_samples)
        history.rewrite(parts.workdir, loop.history)  # drops the lines of iterations after the checkpoint
        if loop.iteration >= c.iterations:
            log.info("the run already finished its %d iterations: nothing to train", loop.iteration)
        return States(actor, critic), agent.resume_replay(replay), loop
    earlier = history.recorded_iterations(parts.workdir)
    if earlier:  # a fresh start would overwrite the record of iterations whose checkpoints are gone
        raise ConfigError(f"--workdir {parts.workdir}: history.jsonl records {earlier} iterations of an earlier run, "
                          f"but no checkpoint in {checkpoints.directory} loads; move history.jsonl and summary.json "
                          "away to start afresh here, or use another --workdir")
    replay = agent.new_replay()
    loop = LoopState(seed=c.seed, rng=jax.random.key_data(parts.key).tolist(), agent=c.agent, env=c.env.name)
    history.rewrite(parts.workdir, [])
    writers.hparams(c.source.to_dict())
    states = warm_start.start(agent, states, writers, loop)
    before = _evaluate(parts, agent.act, states, writers, 0)
    loop.evals.append(dict(iteration=0, env_samples=0, **before))
    writers.scalars(0, before)
    log.info("before training: eval return %.3f, success %.2f", before["eval/return"], before["eval/success"])
    loop.wall_time_s = time.time() - started
    _save(checkpoints, 0, states, replay, loop)
    return states, replay, loop


def _store(parts: Parts, replay, loop: LoopState, episodes, iteration: int) -> None:
    """The rollout of ``iteration`` into the replay buffer, and the loop's counters."""
    loop.env_samples += rollout.store(parts, replay, episodes, loop.episodes)
    loop.episodes += len(episodes)
    loop.collected = iteration


def _record_iteration(parts: Parts, loop: LoopState, writers: report.Writers, progress: report.Progress,
                      iteration: int, episodes, replay, evaluation: tuple | None, seconds: dict[str, float],
                      start: float) -> None:
    """The iteration's metrics (rollouts, step means, counters, evaluation, phase times) into the
    loop's history, history.jsonl, TensorBoard and the console (with the run's ETA)."""
    c = parts.config
    metrics = {f"rollout/{k}": v for k, v in rollout.summarize(episodes).items()} if episodes else {}
    if episodes and c.rollout.staleness:  # the updates the policy that played them lags the serial one by
        metrics["rollout/staleness"] = float(np.mean([e.staleness for e in episodes]))
    metrics.update(parts.metrics.means())
    metrics.update(env_samples=loop.env_samples, episodes=loop.episodes, replay_size=len(replay))
    if evaluation is not None:
        evaluated = evaluation[0]
        metrics.update(evaluated, **{"time/eval": evaluation[1]})
        loop.evals.append(dict(iteration=iteration, env_samples=loop.env_samples, **evaluated))
    metrics.update({f"time/{k}": v for k, v in seconds.items()}, **{"time/iteration": time.perf_counter() - start})
    loop.history.append(dict(iteration=iteration, **metrics))
    history.append(parts.workdir, loop.history[-1])
    loop.iteration = iteration
    writers.scalars(iteration, metrics)
    progress.step(iteration)
    log.info("%s", report.console_line(iteration, c.iterations, metrics, eta_s=progress.eta_s()))


def _save_if_finite(checkpoints: Checkpoints, states: States, replay, loop: LoopState, session_start: float) -> None:
    """Checkpoint the loop's iteration, unless one of its learner steps was non-finite: parameters
    near a divergence are never saved, so the newest checkpoint is always one to resume from."""
    step, loop.wall_time_s = loop.iteration, time.time() - session_start
    if loop.last_finite_iteration() != step:
        log.warning("iteration %d had non-finite learner steps: no checkpoint (the newest is %s)", step,
                    checkpoints.latest())
        return
    _save(checkpoints, step, states, replay, loop)


def _save(checkpoints: Checkpoints, step: int, states: States, replay, loop: LoopState) -> None:
    if distributed.multiprocess():  # every host must hold the same replicated parameters
        loop.host_digests[str(step)] = distributed.assert_hosts_agree(states, f"parameters at iteration {step}")
    checkpoints.save(step, actor=states.actor, critic=states.critic, replay=replay, loop=loop.to_json())


EXAMPLE_DIALOGUES = 3  # of each evaluation, into dialogues/ and TensorBoard's Text tab


def _evaluate(parts: Parts, act, states: States, writers: report.Writers | None = None,
              iteration: int = 0) -> dict[str, float]:
    """The evaluation's metrics: ``eval/*`` of the greedy games, and with ``eval_sampled``
    ``eval_sampled/*`` of the same games sampled. With ``writers``, its first
    :data:`EXAMPLE_DIALOGUES` games of each kind go to ``dialogues/iteration_<N>.txt`` and TensorBoard."""
    greedy = rollout.evaluate(parts, act, states)
    metrics = {f"eval/{k}": v for k, v in rollout.summarize(greedy).items()}
    examples = {"greedy": greedy[:EXAMPLE_DIALOGUES]}
    if parts.config.eval_sampled:
        sampled = rollout.evaluate(parts, act, states, sampled=True)
        metrics.update({f"eval_sampled/{k}": v for k, v in rollout.summarize(sampled).items()})
        examples["sampled"] = sampled[:EXAMPLE_DIALOGUES]
    if writers is not None and distributed.is_primary():
        _write_examples(parts.workdir, writers, iteration, examples)
    return metrics


def _write_examples(workdir: Path, writers: report.Writers, iteration: int, examples: dict[str, list]) -> None:
    """The example dialogues of the evaluation after ``iteration`` (0: before training)."""
    texts = {kind: [f"game {i + 1} ({kind}):\n{rollout.dialogue_text(e)}" for i, e in enumerate(episodes)]
             for kind, episodes in examples.items()}
    folder = workdir / "dialogues"
    folder.mkdir(exist_ok=True)
    (folder / f"iteration_{iteration:04d}.txt").write_text(
        f"evaluation after iteration {iteration}\n\n" + "\n\n".join(t for kind in texts.values() for t in kind) + "\n")
    # TensorBoard renders markdown: the dialogues as code blocks keep their lines
    writers.texts(iteration, {f"dialogues/{kind}": "\n\n".join(f"```\n{t}\n```" for t in kind_texts)
                              for kind, kind_texts in texts.items()})


def _use_compilation_cache(directory: str) -> None:
    """Turns on JAX's persistent compilation cache in ``directory`` unless one is already set, for
    every program (JAX keeps only those that took a second or more to compile unless told)."""
    if directory and not jax.config.jax_compilation_cache_dir:
        path = Path(directory).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(path))
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _finish(c: RunConfig, workdir: Path, loop: LoopState, resumed_at: int,
            stopped: str | None = None) -> dict[str, Any]:
    """summary.json and learning_curve.png from the loop state (``stopped``: why the run stopped
    before its last iteration, if it did)."""
    evals = loop.evals
    summary = dict(
        config=json.loads(c.source.to_json_best_effort()),
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
        critic_pretrain=loop.critic_pretrain,
        wall_time_s=loop.wall_time_s,
        resumed_at_iteration=resumed_at or None,
        config_changes=loop.config_changes,
        stopped=stopped,
    )
    if not distributed.is_primary():  # every host holds the same loop state; one writes it
        return summary
    report.write_summary(workdir, summary)
    report.plot_learning_curve(workdir, evals, f"{c.agent} on {c.env.name}", sft=bool(loop.sft),
                               optimum=report.optimal_return(c.env.name, c.env.max_turns),
                               offline=not agents.get(c.agent).learns_from_rollouts)
    log.info("eval return %.3f -> %.3f (success %.2f -> %.2f); wrote %s and %s%s", summary["eval_return_before"],
             summary["eval_return_after"], summary["eval_success_before"], summary["eval_success_after"],
             workdir / report.SUMMARY, workdir / report.CURVE, _SMOKE_TEST if _is_micro(c.source) else "")
    return summary


_SMOKE_TEST = ("; this was the micro preset, a smoke test that runs every phase once and is too short to learn "
               "(the tiny preset learns in minutes)")


def _is_micro(c: ml_collections.ConfigDict) -> bool:
    """Whether ``c`` has the micro preset's counts (:data:`archer_jax.config.MICRO`, top-level keys)."""
    return all(c.get(key) == expected for key, expected in MICRO.items())
