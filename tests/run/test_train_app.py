"""The training app end to end on the ``micro`` preset: a run, exact resume after ``kill -9``, a
kill in the middle of writing a checkpoint, non-finite losses, and one-line errors.

Runs happen in this process (``train_and_evaluate``) or, where a process must be killed, in a
subprocess with the same environment (8 host devices, offline), so both see the same mesh.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import ml_collections
import numpy as np
import pytest

from archer_jax.config import validate
from archer_jax import config as config_lib
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.envs import registry
from archer_jax.envs.base import StepResult
from archer_jax.envs.twenty_questions import TwentyQuestionsSubset
from archer_jax.errors import TrainingError
from archer_jax.train import build_agent, train_and_evaluate

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "20q.py"


def micro_of(file: str, **overrides) -> ml_collections.ConfigDict:
    """The micro preset of ``configs/<file>`` with ``overrides``; a key ``group__name`` sets ``c.group.name``."""
    c = config_lib.file_config(ROOT / "configs" / file, "micro")
    for key, value in overrides.items():
        *groups, name = key.split("__")
        target = c
        for group in groups:
            target = target[group]
        setattr(target, name, value)
    return c


def micro(**overrides) -> ml_collections.ConfigDict:
    """configs/20q.py's micro preset with ``overrides`` (:func:`micro_of`)."""
    return micro_of("20q.py", **overrides)


def cli(workdir: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "archer_jax.train", f"--config={CONFIG}:micro", f"--workdir={workdir}", *flags]


def restored(workdir: Path, c, step: int | None = None):
    """(actor, critic, replay, loop) of a run's checkpoint (default: the latest)."""
    agent = build_agent(validate(c), workdir)
    run = agent.parts
    try:
        checkpoints = Checkpoints(workdir / "checkpoints")
        step = checkpoints.latest() if step is None else step
        states = agent.init_states()
        return checkpoints.restore(step, actor=states.actor, critic=states.critic)
    finally:
        run.close()


def without_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in history]


def assert_same_tree(a, b) -> None:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---- one run, start to finish -------------------------------------------------------------


@pytest.mark.slow
def test_micro_run_trains_checkpoints_and_reports(tmp_path, caplog):
    c = micro()
    with caplog.at_level(logging.INFO, logger="archer_jax"):
        summary = train_and_evaluate(c, tmp_path)
    # Its last line says a micro run is a smoke test (its return seldom moves in two iterations).
    assert "micro preset, a smoke test" in caplog.records[-1].getMessage(), caplog.records[-1].getMessage()
    assert summary["iterations"] == 2 and summary["env_samples"] > 0
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    for key in ("config", "iterations", "env_samples", "eval_return_before", "eval_return_after", "wall_time_s"):
        assert key in on_disk
    assert on_disk["config"]["agent"] == "archer" and on_disk["sft"]["steps"] == c.sft.steps
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000
    assert list(tmp_path.glob("events.out.tfevents.*")), "no TensorBoard event file"
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == [1, 2]
    # Iteration 1 is warm-up (critic only); iteration 2 also steps the actor.
    assert "critic/loss" in history[0] and "actor/loss" not in history[0] and "actor/loss" in history[1]
    assert history[1]["env_samples"] == summary["env_samples"]
    assert all(math.isfinite(h["critic/loss"]) for h in history)
    assert Checkpoints(tmp_path / "checkpoints").latest() == 2
    assert not (tmp_path / "run.lock").exists(), "the run left its workdir locked"

    # The checkpoint holds what the run trained: the actor moved away from the SFT result and the
    # critic's target moved toward the critic (Polyak), and the replay buffer holds every sample.
    actor, critic, replay, loop = restored(tmp_path, c)
    assert int(critic.step) == c.critic_steps * 2 and int(actor.step) == c.actor_steps * 1
    assert len(replay) == summary["env_samples"] and loop["iteration"] == 2

    # Starting again on a finished workdir resumes at the end: nothing is trained twice.
    again = train_and_evaluate(c, tmp_path)
    assert again["iterations"] == 2 and again["env_samples"] == summary["env_samples"]


@pytest.mark.slow
def test_chai_trains_the_critic_only_and_filtered_bc_the_policy_only(tmp_path):
    chai = micro(agent="chai", chai_samples=2, iterations=1, sft__steps=0)
    train_and_evaluate(chai, tmp_path / "chai")
    actor0, critic0, _, _ = restored(tmp_path / "chai", chai, step=0)
    actor1, critic1, _, loop = restored(tmp_path / "chai", chai, step=1)
    assert_same_tree(actor1.params, actor0.params)  # CHAI's policy is frozen
    assert int(critic1.step) == chai.critic_steps and "actor/loss" not in loop["history"][0]

    bc = micro(agent="filtered_bc", iterations=1, sft__steps=0)
    train_and_evaluate(bc, tmp_path / "bc")
    actor0, critic0, _, _ = restored(tmp_path / "bc", bc, step=0)
    actor1, critic1, _, loop = restored(tmp_path / "bc", bc, step=1)
    assert critic1 is None and int(actor1.step) == bc.bc_steps
    assert "bc/loss" in loop["history"][0] and "critic/loss" not in loop["history"][0]
    assert not (tmp_path / "bc" / "models" / "tiny_roberta").exists()  # no critic is built


# ---- exact resume -------------------------------------------------------------------------


def _wait_for(predicate, process: subprocess.Popen, timeout: float = 240.0, poll: float = 0.002) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if process.poll() is not None:
            raise AssertionError(f"the run ended (rc {process.returncode}) before the awaited moment")
        if time.time() > deadline:
            process.kill()
            raise AssertionError("timed out waiting for the run")
        time.sleep(poll)


def _complete_steps(workdir: Path) -> set[int]:
    directory = workdir / "checkpoints"
    if not directory.is_dir():
        return set()
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit() and (p / "commit_success.txt").exists()}


def _partial_steps(workdir: Path) -> list[Path]:
    directory = workdir / "checkpoints"
    return [p for p in directory.iterdir() if "tmp" in p.name] if directory.is_dir() else []


FOUR = dict(iterations=4, save_freq=2, eval_freq=2)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """Four iterations without interruption: the reference for the resumed runs. It stores its SFT
    in ``sft_cache`` (its workdir's), which the runs compared with it do not: so storing changes nothing."""
    workdir = tmp_path_factory.mktemp("straight")
    c = micro(**FOUR, sft__cache=str(workdir / "sft_cache"))
    train_and_evaluate(c, workdir)
    return workdir, restored(workdir, c)


def _assert_same_run(reference, workdir: Path) -> None:
    ref_actor, ref_critic, ref_replay, ref_loop = reference
    actor, critic, replay, loop = restored(workdir, micro(**FOUR))
    assert loop["iteration"] == ref_loop["iteration"] == 4
    assert_same_tree(actor.params, ref_actor.params)
    assert_same_tree(actor.opt_state, ref_actor.opt_state)
    assert_same_tree(critic.params, ref_critic.params)
    assert_same_tree(critic.target, ref_critic.target)
    assert without_time(loop["history"]) == without_time(ref_loop["history"])
    assert loop["evals"] == ref_loop["evals"]
    assert replay.rng.bit_generator.state == ref_replay.rng.bit_generator.state
    assert replay.columns["action"][: len(replay)] == ref_replay.columns["action"][: len(ref_replay)]


@pytest.mark.slow
def test_sampled_evaluation_adds_its_metrics_and_changes_nothing_else(straight, tmp_path):
    _, reference = straight
    train_and_evaluate(micro(**FOUR, eval_sampled=True), tmp_path)
    actor, critic, _, loop = restored(tmp_path, micro(**FOUR))
    assert_same_tree(actor.params, reference[0].params)
    assert_same_tree(critic.params, reference[1].params)
    sampled = lambda row: {k: v for k, v in row.items() if k.startswith("eval_sampled/")}  # noqa: E731
    assert without_time([{k: v for k, v in h.items() if k not in sampled(h)} for h in loop["history"]]) == \
        without_time(reference[3]["history"])
    assert [{k: v for k, v in e.items() if k not in sampled(e)} for e in loop["evals"]] == reference[3]["evals"]
    # Before training and at every evaluation, the same games sampled: a return in [-max_turns, 0].
    assert [e["iteration"] for e in loop["evals"] if sampled(e)] == [0, 2, 4]
    for e in loop["evals"]:
        assert set(sampled(e)) == {f"eval_sampled/{k[len('eval/'):]}" for k in e if k.startswith("eval/")}
        assert -micro().env.max_turns <= e["eval_sampled/return"] <= 0
    assert [h["iteration"] for h in loop["history"] if sampled(h)] == [2, 4]


@pytest.mark.slow
def test_a_run_that_takes_its_sft_from_the_cache_is_the_same_run(straight, tmp_path, caplog):
    workdir, _ = straight
    (entry,) = (workdir / "sft_cache").iterdir()  # the straight run's SFT
    stored = json.loads((workdir / "summary.json").read_text())["sft"]
    assert stored["cache"] == str(entry)
    ref_actor, ref_critic, _, ref_loop = restored(workdir, micro(**FOUR), step=2)  # its first two iterations
    with caplog.at_level(logging.INFO, logger="archer_jax"):
        taken = train_and_evaluate(micro(**dict(FOUR, iterations=2), sft__cache=str(entry.parent)), tmp_path)
    assert "taken from the cache" in caplog.text and taken["sft"]["cache"] == str(entry)
    assert {k: taken["sft"][k] for k in ("first_loss", "last_loss", "pairs")} == \
        {k: stored[k] for k in ("first_loss", "last_loss", "pairs")}
    actor, critic, _, loop = restored(tmp_path, micro(**FOUR))
    assert_same_tree(actor.params, ref_actor.params)
    assert_same_tree(critic.params, ref_critic.params)
    assert without_time(loop["history"]) == without_time(ref_loop["history"])
    assert loop["evals"] == ref_loop["evals"]
    assert list(entry.parent.iterdir()) == [entry]


@pytest.mark.slow
def test_sigterm_saves_reports_and_exits_with_one_line_then_resume_is_exact(straight, tmp_path):
    _, reference = straight
    process = subprocess.Popen(cli(tmp_path, "--config.iterations=4", "--config.save_freq=2", "--config.eval_freq=2"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    history = tmp_path / "history.jsonl"
    _wait_for(lambda: history.is_file() and history.read_text().count("\n") >= 1, process)  # iteration 1 is done
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=240)
    last = stderr.strip().splitlines()[-1]
    assert process.returncode != 0 and "Traceback" not in stderr, stderr[-3000:]
    stopped_after = int(last.split("stopped after iteration ")[1].split(";")[0])
    assert last == f"error: SIGTERM: stopped after iteration {stopped_after}; the same command resumes from checkpoint {stopped_after}"
    assert stopped_after in _complete_steps(tmp_path)
    assert len(history.read_text().splitlines()) == stopped_after
    assert json.loads((tmp_path / "summary.json").read_text())["stopped"] == last.removeprefix("error: ")

    summary = train_and_evaluate(micro(**FOUR), tmp_path)
    assert summary["resumed_at_iteration"] == stopped_after and summary["stopped"] is None
    _assert_same_run(reference, tmp_path)


@pytest.mark.slow
def test_kill_9_while_writing_a_checkpoint_resumes_from_the_previous_one_exactly(straight, tmp_path):
    """kill -9 at the worst moment: with a checkpoint half written. (A kill -9 at any other moment
    leaves only complete checkpoints, the same case minus the partial directory.)"""
    _, reference = straight
    process = subprocess.Popen(cli(tmp_path, "--config.iterations=4", "--config.save_freq=1", "--config.eval_freq=2"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Freeze the process the moment a checkpoint directory is being written (after step 1 is
    # complete), check it is still unfinished, then kill it.
    while True:
        _wait_for(lambda: 1 in _complete_steps(tmp_path) and _partial_steps(tmp_path), process)
        process.send_signal(signal.SIGSTOP)
        partial = _partial_steps(tmp_path)
        if partial:
            break
        process.send_signal(signal.SIGCONT)  # it finished between the two looks: wait for the next
    process.send_signal(signal.SIGKILL)
    process.wait()
    complete = _complete_steps(tmp_path)
    assert complete and all(p.exists() for p in partial)

    summary = train_and_evaluate(micro(**FOUR), tmp_path)
    assert summary["resumed_at_iteration"] == max(complete)
    assert not _partial_steps(tmp_path)
    _assert_same_run(reference, tmp_path)


# A run that kills itself (SIGKILL: no cleanup) at its ``KILL_AT``-th critic step, inside a critic
# phase whose a_π were all drawn up front.
_KILLED_IN_A_CRITIC_PHASE = """
import os, runpy, signal, sys
from archer_jax.agents import archer

KILL_AT = int(sys.argv.pop(1))
made = archer.critic_step


class Killing:
    def __init__(self, program):
        self.program, self.calls = program, 0

    def __getattr__(self, name):
        return getattr(self.program, name)

    def __call__(self, *args):
        self.calls += 1
        if self.calls == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.program(*args)


archer.critic_step = lambda *a, **k: Killing(made(*a, **k))
runpy.run_module("archer_jax.train", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_kill_9_inside_a_critic_phase_resumes_exactly(straight, tmp_path):
    _, reference = straight
    c = micro(**FOUR)
    kill_at = 2 * c.critic_steps + c.critic_steps // 2  # iteration 3, half-way through its critic steps
    flags = ["--config.iterations=4", "--config.save_freq=2", "--config.eval_freq=2"]
    process = subprocess.run([sys.executable, "-c", _KILLED_IN_A_CRITIC_PHASE, str(kill_at), *cli(tmp_path, *flags)[3:]],
                             capture_output=True, text=True, timeout=600)
    assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
    assert max(_complete_steps(tmp_path)) == 2 and (tmp_path / "history.jsonl").read_text().count("\n") == 2

    summary = train_and_evaluate(micro(**FOUR), tmp_path)
    assert summary["resumed_at_iteration"] == 2
    _assert_same_run(reference, tmp_path)


# ---- non-finite losses --------------------------------------------------------------------


class NanRewardGame(TwentyQuestionsSubset):
    """Twenty Questions whose rewards are NaN: every critic loss is non-finite."""

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        return result._replace(reward=float("nan"))


@pytest.mark.slow
def test_non_finite_losses_are_skipped_counted_and_stop_the_run(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.ENVS, "nan_game", registry.EnvSpec(lambda c: functools.partial(NanRewardGame)))
    # 2 critic steps per iteration; the 4th consecutive skipped step stops the run (iteration 2).
    c = micro(env__name="nan_game", sft__steps=0, iterations=4, save_freq=1, max_nonfinite_steps=4)
    with pytest.raises(TrainingError) as stopped:
        train_and_evaluate(c, tmp_path)
    assert str(stopped.value).startswith("stopped at iteration 2: 4 consecutive critic steps had a non-finite loss")
    assert str(stopped.value).endswith("the last iteration whose steps were all finite is 0; checkpoint 0 is intact")
    # Iteration 1 had non-finite steps: no checkpoint was saved after it, only before (step 0).
    assert _complete_steps(tmp_path) == {0}

    # Its two steps were skipped and counted, and the reports say so.
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [h["iteration"] for h in history] == [1] and history[0]["critic/nonfinite"] == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["stopped"] == str(stopped.value)
    assert (tmp_path / "learning_curve.png").is_file()
    actor0, critic0, _, loop = restored(tmp_path, c, step=0)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(critic0.params))
    assert loop["iteration"] == 0


@pytest.mark.slow
def test_a_run_whose_last_iterations_were_not_finite_does_not_report_itself_finished(tmp_path, monkeypatch):
    """Fewer non-finite steps than stop a run, but in its last iteration: that iteration is not
    saved, so the run did not finish: it raises and its summary says why."""
    monkeypatch.setitem(registry.ENVS, "nan_game", registry.EnvSpec(lambda c: functools.partial(NanRewardGame)))
    c = micro(env__name="nan_game", sft__steps=0, iterations=2, save_freq=1, max_nonfinite_steps=100)
    with pytest.raises(TrainingError) as stopped:
        train_and_evaluate(c, tmp_path)
    message = str(stopped.value)
    assert "\n" not in message and message.startswith("stopped after iteration 2: 4 learner steps of iteration(s) 1, 2 "
                                                        "had a non-finite loss or gradient")
    assert message.endswith("checkpoint 0 is intact, and the same command trains again from it")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iterations"] == 2 and summary["stopped"] == message
    assert _complete_steps(tmp_path) == {0}


# ---- stops by a failure: every one writes why in summary.json ---------------------------


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_stops_in_one_line_and_the_summary_says_so(tmp_path, monkeypatch):
    from archer_jax.records import checkpoint

    real = checkpoint.shutil.disk_usage
    full = lambda path: real(path)._replace(free=0) if (tmp_path / "checkpoints" / "1").exists() else real(path)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", full)  # room for checkpoints 0 and 1 only
    with pytest.raises(TrainingError) as stopped:
        train_and_evaluate(micro(iterations=3, save_freq=1), tmp_path)
    message = str(stopped.value)
    assert "\n" not in message and message.startswith("stopped after iteration 2: checkpoint 2 needs about ")
    assert message.endswith("MiB are free; checkpoint 1 is intact: make room (or fix the path) and the same command "
                            "resumes from it")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped"] == message and summary["iterations"] == 2
    assert _complete_steps(tmp_path) == {0, 1}


@pytest.mark.slow
def test_an_unexpected_error_is_recorded_as_the_stop(tmp_path, monkeypatch):
    from archer_jax.run import loop as train

    original = train.rollout.collect

    def collect(parts, act, states, iteration):
        if iteration == 2:
            raise RuntimeError("the env server went away\nits details")
        return original(parts, act, states, iteration)

    monkeypatch.setattr(train.rollout, "collect", collect)
    with pytest.raises(RuntimeError, match="the env server went away"):
        train_and_evaluate(micro(iterations=3, save_freq=1), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped"] == "stopped at iteration 2 by an error: RuntimeError: the env server went away"


@pytest.mark.slow
def test_a_workdir_deleted_during_the_run_stops_in_one_line(tmp_path, monkeypatch):
    import shutil

    from archer_jax.run import loop as train

    workdir, original = tmp_path / "run", train.rollout.collect

    def collect(parts, act, states, iteration):
        if iteration == 2:
            shutil.rmtree(workdir)
        return original(parts, act, states, iteration)

    monkeypatch.setattr(train.rollout, "collect", collect)
    with pytest.raises(TrainingError) as stopped:
        train_and_evaluate(micro(iterations=3, save_freq=1), workdir)
    message = str(stopped.value)
    assert "\n" not in message and message.startswith(f"stopped at iteration 2: the workdir {workdir} is gone (deleted "
                                                        "or unmounted during the run: FileNotFoundError: ")
    assert not workdir.exists()  # nothing was made again there


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(agent="reinforce"), "config.agent: unknown value 'reinforce'"),
        (dict(env__name="chess"), "config.env.name: unknown env 'chess'"),
        (dict(model__policy="/no/such/model"), "config.model.policy: model directory /no/such/model does not exist"),
        (dict(model__critic="./missing_roberta"), "config.model.critic: model directory ./missing_roberta does not exist"),
        (dict(model__critic="tiny:gpt2"), "config.model.critic: 'tiny:gpt2' is not a model built offline for this role"),
        (dict(model__policy="no-such-org/no-such-model"), "config.model.policy: cannot load 'no-such-org/no-such-model'"),
        (dict(learner__critic_lr=-1.0), r"config.learner.critic_lr: must be > 0"),
        (dict(learner__gamma=1.5), r"config.learner.gamma: must be in \[0, 1\]"),
        (dict(learner__actor_loss="ppo"),
         "config.learner.actor_loss: unknown value 'ppo'; known: actor_pg, actor_token_baseline"),
        (dict(sft__experts="optimal,lazy"), "config.sft.experts: unknown expert 'lazy'"),
        (dict(sft__data="/no/such/file.jsonl"), "config.sft.data: '/no/such/file.jsonl' is not"),
        (dict(env__name="detective"), "config.env.options.game_path: missing"),
        (dict(learner__micro_batch_size="some"), "config.learner.micro_batch_size: must be 'auto' or a positive integer"),
        (dict(learner__micro_batch_size=0), "config.learner.micro_batch_size: must be 'auto' or a positive integer"),
        (dict(learner__micro_batch_size=3),
         r"config.learner.micro_batch_size: 3 does not cut the step batch of 8 transitions \(batch_size x grad_accum_steps\)"),
        (dict(model__remat="some"), "config.model.remat: unknown value 'some'; known: none, dots, full"),
    ],
)
def test_bad_configs_fail_before_anything_is_built(overrides, message, tmp_path):
    c = micro(**overrides)
    with pytest.raises(config_lib.ConfigError, match=message):
        train_and_evaluate(c, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_unknown_keys_and_wrong_types_in_a_config_object():
    c = micro()
    c.unlock()
    c.learning_rate = 0.1
    with pytest.raises(config_lib.ConfigError, match="config.learning_rate: unknown config key"):
        config_lib.validate(c)
    # ConfigDict itself refuses a wrong type on assignment; a config built from a dict is checked here.
    c = ml_collections.ConfigDict({**micro().to_dict(), "critic_steps": "ten"})
    with pytest.raises(config_lib.ConfigError, match="config.critic_steps: expected int, got str 'ten'"):
        config_lib.validate(c)
    # A key of the old flat config names its new place.
    c = micro()
    c.unlock()
    c.lm_lr = 1e-5
    with pytest.raises(config_lib.ConfigError, match=r"^config.lm_lr: renamed to config.learner.actor_lr \("):
        config_lib.validate(c)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--config.learning_rate=0.1"], "error: --config.learning_rate: unknown config key"),
        (["--config.critic_steps=ten"], "error: flag --config.critic_steps=ten: invalid literal for int()"),
        (["--config.env.name=chess"], "error: config.env.name: unknown env 'chess'"),
        (["--config.lm_lr=1e-5"], "error: --config.lm_lr: renamed to config.learner.actor_lr"),
        (["--config.epochs=3"], "error: --config.epochs: renamed to config.critic_steps (bc_steps for filtered_bc)"),
        (["--config.learner.micro_batch_size=5"], "error: config.learner.micro_batch_size: 5 does not cut the step batch"),
    ],
)
def test_command_line_errors_are_one_line(flags, message, tmp_path):
    run = subprocess.run(cli(tmp_path / "run", *flags), capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(message), run.stderr[-2000:]
    assert "Traceback" not in run.stderr
