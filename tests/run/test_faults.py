"""Faults a run must survive without losing work (issue 19): checkpoints that do not load,
SIGINT/SIGTERM, and a workdir run again with another config.

The runs are the ``micro`` preset in this process (signals are sent to this process by the code
under test's own phases, through monkeypatched hooks); the command line's SIGTERM is tested in
``test_train_app.py``, next to ``kill -9``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
from pathlib import Path

import jax
import numpy as np
import pytest

from archer_jax.config import validate
from archer_jax.run import loop as train
from archer_jax.records import history
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.errors import ConfigError, RunInterrupted, TrainingError
from archer_jax.records import history
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.records.interrupts import Interrupts
from archer_jax.records.loop_state import LoopState
from archer_jax.train import train_and_evaluate
from tests.run.test_train_app import _complete_steps, assert_same_tree, micro, restored

pytestmark = pytest.mark.slow  # every test here but the last trains or resumes a run

THREE = dict(iterations=3, save_freq=1, eval_freq=3, keep_checkpoints=3)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished three-iteration run with checkpoints 1, 2 and 3 (copied by each test)."""
    workdir = tmp_path_factory.mktemp("finished")
    train_and_evaluate(micro(**THREE), workdir)
    assert _complete_steps(workdir) == {1, 2, 3}
    return workdir


def _copy(finished: Path, tmp_path: Path) -> Path:
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir)
    return workdir


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _flip_bits(step: Path) -> None:
    """4 KB of flipped bits in the middle of the critic's largest array file: it still decodes, to NaN."""
    path = max((p for p in (step / "critic").rglob("d/*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(b ^ 0x5A for b in data[middle:middle + 4096])
    path.write_bytes(bytes(data))


# ---- checkpoints that do not load ---------------------------------------------------------

CORRUPTIONS = {
    # the actor's array data (orbax's OCDBT data files)
    "actor arrays": lambda step: [_truncate(p) for p in (step / "actor").rglob("d/*") if p.is_file()],
    "critic bits": _flip_bits,  # loads without an error: the checksums saved with it catch it
    "critic manifest": lambda step: (step / "critic" / "manifest.ocdbt").unlink(),
    "replay.npz": lambda step: _truncate(step / "replay" / "process_0" / "replay.npz"),
    "replay.json": lambda step: (step / "replay" / "process_0" / "replay.json").write_text("{\"capacity\": 1"),
    "loop state": lambda step: (step / "loop" / "metadata").write_text("{\"seed\": 0, \"iteration\":"),
    "loop state keys": lambda step: (step / "loop" / "metadata").write_text(json.dumps({"iteration": 3})),
}


@pytest.fixture(scope="module")
def templates(finished):
    """The (actor, critic) states a restore fills, built once for the micro config."""
    agent = train.build_agent(validate(micro(**THREE)), finished)
    try:
        states = agent.init_states()
        return states.actor, states.critic
    finally:
        agent.parts.close()


def _restore_latest(workdir: Path, templates):
    actor, critic = templates
    return Checkpoints(workdir / "checkpoints").restore_latest(
        actor=actor, critic=critic, check=lambda restored: LoopState.from_json(restored[3]))


def _assert_skipped_3(workdir: Path, caplog) -> None:
    warnings = [r.getMessage() for r in caplog.records if "could not be restored" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith("checkpoint(s) 3 could not be restored (3: ") and "resumed from step 2" in warnings[0]
    aside = list((workdir / "checkpoints.unreadable").iterdir())
    assert [p.name.split(".")[0] for p in aside] == ["3"]  # kept for inspection, not deleted


@pytest.mark.parametrize("kind", sorted(set(CORRUPTIONS) - {"actor arrays"}))
def test_a_checkpoint_that_does_not_load_is_skipped_and_moved_aside(kind, finished, templates, tmp_path, caplog,
                                                                   capfd):
    workdir = _copy(finished, tmp_path)
    CORRUPTIONS[kind](workdir / "checkpoints" / "3")
    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        step, (_, critic, _, loop) = _restore_latest(workdir, templates)
    assert step == 2 and LoopState.from_json(loop).iteration == 2
    _assert_skipped_3(workdir, caplog)
    assert "Traceback" not in capfd.readouterr().err  # the one line only
    _, ref_critic, _, _ = Checkpoints(finished / "checkpoints").restore(2, actor=templates[0], critic=templates[1])
    assert_same_tree(critic.params, ref_critic.params)


def test_a_run_resumes_from_the_newest_checkpoint_that_loads_and_matches_the_straight_run(finished, tmp_path, caplog):
    workdir = _copy(finished, tmp_path)
    CORRUPTIONS["actor arrays"](workdir / "checkpoints" / "3")
    c = micro(**THREE)
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        summary = train_and_evaluate(c, workdir)

    # Resumed from checkpoint 2, ran iteration 3 again and saved a good checkpoint 3.
    assert summary["resumed_at_iteration"] == 2 and summary["iterations"] == 3
    _assert_skipped_3(workdir, caplog)
    assert _complete_steps(workdir) == {1, 2, 3}

    # The new checkpoint 3 is the straight run's, exactly.
    _, ref_critic, _, ref_loop = restored(finished, c)
    _, critic, _, loop = restored(workdir, c)
    assert_same_tree(critic.params, ref_critic.params)
    assert loop["evals"] == ref_loop["evals"]


def test_when_no_checkpoint_loads_the_error_is_one_line_and_nothing_moves(finished, templates, tmp_path):
    workdir = _copy(finished, tmp_path)
    for step in (1, 2, 3):
        CORRUPTIONS["replay.npz"](workdir / "checkpoints" / str(step))
    with pytest.raises(TrainingError) as error:
        _restore_latest(workdir, templates)
    message = str(error.value)
    assert "\n" not in message and "no checkpoint in" in message
    assert all(f"step {s}: " in message for s in (1, 2, 3))
    assert _complete_steps(workdir) == {1, 2, 3} and not (workdir / "checkpoints.unreadable").exists()


def test_a_workdir_whose_checkpoints_are_gone_keeps_its_record(finished, tmp_path):
    """Every checkpoint removed, history and summary kept: a fresh start would overwrite the record
    of the iterations done; it is refused in one line, and nothing is rewritten."""
    workdir = _copy(finished, tmp_path)
    shutil.rmtree(workdir / "checkpoints")
    kept = {name: (workdir / name).read_bytes() for name in ("history.jsonl", "summary.json")}
    with pytest.raises(ConfigError, match=r"history.jsonl records 3 iterations of an earlier run, but no checkpoint "
                                          r"in .*/checkpoints loads; move history.jsonl and summary.json away"):
        train_and_evaluate(micro(**THREE), workdir)
    assert {name: (workdir / name).read_bytes() for name in kept} == kept


def test_the_last_good_checkpoint_survives_rotation(finished, tmp_path):
    """keep_checkpoints=1 with an unreadable newest checkpoint: the run resumes from the good one,
    and orbax's rotation never deletes it before a newer good one is complete."""
    workdir = _copy(finished, tmp_path)
    shutil.rmtree(workdir / "checkpoints" / "1")
    CORRUPTIONS["loop state"](workdir / "checkpoints" / "3")
    c = micro(**{**THREE, "keep_checkpoints": 1, "iterations": 4})
    summary = train_and_evaluate(c, workdir)
    assert summary["resumed_at_iteration"] == 2 and _complete_steps(workdir) == {4}
    assert [p.name.split(".")[0] for p in (workdir / "checkpoints.unreadable").iterdir()] == ["3"]


# ---- non-finite steps: see test_train_app.py (no checkpoint after a non-finite step) --------


# ---- signals ------------------------------------------------------------------------------


def _signal_during(monkeypatch, phase: str, iteration: int, signals: tuple[int, ...]):
    """Sends ``signals`` to this process while ``phase`` ("collect" or "learn") of ``iteration`` runs."""
    if phase == "collect":
        original = train.rollout.collect

        def hooked(parts, act, states, it):
            if it == iteration:
                for sig in signals:
                    os.kill(os.getpid(), sig)
            return original(parts, act, states, it)

        monkeypatch.setattr(train.rollout, "collect", hooked)
    else:
        from archer_jax.agents import archer

        original = archer.ArCHer.learn

        def hooked(self, states, replay, it):
            if it == iteration:
                for sig in signals:
                    os.kill(os.getpid(), sig)
            return original(self, states, replay, it)

        monkeypatch.setattr(archer.ArCHer, "learn", hooked)


def test_a_signal_during_a_rollout_abandons_it_saves_the_last_iteration_and_reports(monkeypatch, tmp_path):
    sig = signal.SIGINT  # SIGTERM: the next test, and the command line's in test_train_app.py
    handler = signal.getsignal(sig)
    _signal_during(monkeypatch, "collect", 3, (sig,))
    c = micro(iterations=5, save_freq=4, eval_freq=4)
    with pytest.raises(RunInterrupted) as stopped:
        train_and_evaluate(c, tmp_path)
    name = signal.Signals(sig).name
    assert str(stopped.value) == f"{name}: stopped after iteration 2; the same command resumes from checkpoint 2"
    assert _complete_steps(tmp_path) == {0, 2}  # save_freq 4: checkpoint 2 was written for the stop
    assert [row["iteration"] for row in history.read(tmp_path)] == [1, 2]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iterations"] == 2 and summary["stopped"] == str(stopped.value)
    assert (tmp_path / "learning_curve.png").is_file()
    assert signal.getsignal(sig) is handler  # the caller's handler is back


def test_a_signal_during_learning_lets_the_iteration_finish_and_saves_it(monkeypatch, tmp_path):
    _signal_during(monkeypatch, "learn", 2, (signal.SIGTERM,))
    c = micro(iterations=5, save_freq=4, eval_freq=4)
    with pytest.raises(RunInterrupted, match=r"^SIGTERM: stopped after iteration 2; .* checkpoint 2$"):
        train_and_evaluate(c, tmp_path)
    assert _complete_steps(tmp_path) == {0, 2}
    _, _, _, loop = restored(tmp_path, c)
    assert loop["iteration"] == 2 and len(loop["history"]) == 2

    rows = history.read(tmp_path)
    assert [row["iteration"] for row in rows] == [1, 2]  # appended as the run went

    # A run killed after its last checkpoint may have appended more lines: a resume drops them.
    with (tmp_path / "history.jsonl").open("a") as f:
        f.write(json.dumps(dict(rows[-1], iteration=3, bogus=1.0)) + "\n")
    monkeypatch.undo()
    summary = train_and_evaluate(micro(iterations=3, save_freq=4, eval_freq=4), tmp_path)  # the same command
    assert summary["resumed_at_iteration"] == 2 and summary["stopped"] is None
    again = history.read(tmp_path)
    assert [row["iteration"] for row in again] == [1, 2, 3] and "bogus" not in again[2]
    assert again[:2] == rows


def test_a_second_signal_stops_at_once_and_keeps_the_checkpoint_before(monkeypatch, tmp_path):
    _signal_during(monkeypatch, "learn", 2, (signal.SIGINT, signal.SIGINT))
    with pytest.raises(RunInterrupted, match=r"^SIGINT: stopped at once at iteration 2; checkpoint 1 is intact"):
        train_and_evaluate(micro(iterations=5, save_freq=1, eval_freq=4), tmp_path)
    assert _complete_steps(tmp_path) == {0, 1}
    assert [row["iteration"] for row in history.read(tmp_path)] == [1]
    assert json.loads((tmp_path / "summary.json").read_text())["iterations"] == 1


# ---- a workdir run again with another config ----------------------------------------------


def _files(workdir: Path) -> dict[str, bytes]:
    return {name: (workdir / name).read_bytes() for name in ("config.json", "summary.json", "history.jsonl")
            if (workdir / name).exists()}


def test_a_changed_config_is_refused_in_one_line_and_nothing_is_rewritten(finished, tmp_path):
    workdir = _copy(finished, tmp_path)
    before = _files(workdir)
    c = micro(**THREE, learner__critic_lr=0.5, learner__gamma=0.5)
    with pytest.raises(ConfigError) as error:
        train_and_evaluate(c, workdir)
    message = str(error.value)
    assert "\n" not in message and "learner.critic_lr" in message and "learner.gamma" in message
    assert "--allow_config_changes" in message
    assert _files(workdir) == before


@pytest.mark.parametrize("overrides, key", [
    (dict(capacity=123), "capacity"),
    (dict(learner__actor_loss="actor_token_baseline"), "learner.actor_loss"),
    (dict(seed=7), "seed"),
])
def test_keys_a_checkpoint_depends_on_cannot_change_even_when_allowed(overrides, key, finished, tmp_path):
    workdir = _copy(finished, tmp_path)
    before = _files(workdir)
    with pytest.raises(ConfigError, match=rf"keys a resume cannot change \({key} "):
        train_and_evaluate(micro(**THREE, **overrides), workdir, allow_config_changes=True)
    assert _files(workdir) == before


@pytest.mark.parametrize("overrides, named", [
    (dict(seed=3), "seed: 0 there, 3 here"),
    (dict(agent="chai", chai_samples=2), "agent: 'archer' there, 'chai' here"),
    (dict(env__name="twenty_questions"), "env.name: 'twenty_questions_subset' there, 'twenty_questions' here"),
])
@pytest.mark.parametrize("config_json", ["deleted", "garbled"])
def test_without_config_json_the_checkpoint_own_record_guards_the_resume(overrides, named, config_json, finished,
                                                                         tmp_path):
    workdir = _copy(finished, tmp_path)
    if config_json == "deleted":
        (workdir / "config.json").unlink()
    else:
        (workdir / "config.json").write_text("{\"seed\": ")
    before = _files(workdir)
    with pytest.raises(ConfigError) as error:
        train_and_evaluate(micro(**THREE, **overrides), workdir, allow_config_changes=True)
    assert str(error.value) == (f"--workdir {workdir}: checkpoint 3 there is another run's ({named}); use another "
                                "--workdir, or the config that run was trained with")
    assert _files(workdir) == before  # config.json not written over either


def test_allowed_changes_apply_from_the_next_iteration_and_are_recorded(finished, tmp_path):
    workdir = _copy(finished, tmp_path)
    c = micro(**{**THREE, "iterations": 4}, learner__critic_lr=1e-3)
    summary = train_and_evaluate(c, workdir, allow_config_changes=True)
    assert summary["iterations"] == 4 and summary["resumed_at_iteration"] == 3
    old_lr = micro().learner.critic_lr
    assert summary["config_changes"] == [
        dict(iteration=3, changes={"iterations": [3, 4], "learner.critic_lr": [old_lr, 1e-3]})
    ]
    assert json.loads((workdir / "config.json").read_text())["learner"]["critic_lr"] == 1e-3
    assert summary["config"]["learner"]["critic_lr"] == 1e-3
    # Applied: the critic's step 4 used the new rate (a bigger step than the old one's).
    _, critic3, _, _ = restored(finished, micro(**THREE))
    _, critic4, _, loop = restored(workdir, c)
    assert loop["config_changes"] == summary["config_changes"]
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(critic4.params), jax.tree.leaves(critic3.params)))
    assert moved > 0


def test_free_keys_change_without_the_flag(finished, tmp_path, caplog):
    workdir = _copy(finished, tmp_path)
    # sft.cache is free although the other sft.* keys are fixed: the warm start is done.
    c = micro(**{**THREE, "iterations": 4, "eval_freq": 2}, sft__cache=str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        changes = train._config_changes(validate(c), workdir, Checkpoints(workdir / "checkpoints"), allow=False)
    assert changes == {"eval_freq": (3, 2), "iterations": (3, 4), "sft.cache": ("", str(tmp_path / "cache"))}
    assert any("resuming with changed config keys: eval_freq, iterations, sft.cache" in r.getMessage()
               for r in caplog.records)
    assert json.loads((workdir / "config.json").read_text())["eval_freq"] == 2


def test_a_workdir_without_a_checkpoint_starts_afresh_with_the_new_config(tmp_path, caplog):
    (tmp_path / "config.json").write_text(json.dumps({"learner": {"critic_lr": 0.5}}))
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        changes = train._config_changes(validate(micro(iterations=1)), tmp_path, Checkpoints(tmp_path / "checkpoints"), allow=False)
    assert changes == {}
    assert not any("changed config" in r.getMessage() for r in caplog.records)
    assert json.loads((tmp_path / "config.json").read_text())["learner"]["critic_lr"] == micro().learner.critic_lr


def test_loop_state_names_the_last_finite_iteration():
    loop = LoopState(seed=0, rng=[0, 0])
    assert loop.last_finite_iteration() == 0
    loop.history = [dict(iteration=1, **{"critic/nonfinite": 0.0}), dict(iteration=2, **{"critic/nonfinite": 2.0})]
    assert loop.last_finite_iteration() == 1


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_sighup_is_a_stop_request_like_sigterm():
    """A closed terminal or a lost SSH session (SIGHUP) asks the run to save and stop, as SIGTERM
    does; it no longer kills the run at once with everything since the last checkpoint."""
    outside = []

    def caller(*_):
        outside.append("SIGHUP")

    previous = signal.signal(signal.SIGHUP, caller)
    try:
        with Interrupts() as interrupts:
            signal.raise_signal(signal.SIGHUP)
            assert interrupts.stop_requested() and interrupts.requested == "SIGHUP"
        assert outside == []
        assert signal.getsignal(signal.SIGHUP) is caller  # the caller's handler is back
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # under nohup: ignored, and left so
        with Interrupts() as interrupts:
            signal.raise_signal(signal.SIGHUP)
            assert not interrupts.stop_requested()
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_save_freq_zero_saves_the_last_iteration_only(tmp_path):
    """``save_freq=0``, as ``eval_freq=0``: only at the end (it divided by zero after the SFT)."""
    summary = train_and_evaluate(micro(iterations=3, save_freq=0, eval_freq=0), tmp_path)
    assert summary["stopped"] is None and summary["iterations"] == 3
    assert _complete_steps(tmp_path) == {0, 3}
