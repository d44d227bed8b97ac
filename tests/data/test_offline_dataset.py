"""An offline run's dataset: built from exactly the files the config names (rebuilt when they change,
refused on resume when they changed since the checkpoint), and bad files reported in one line
naming config.offline.dataset and the user's file, before anything is built."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest

from archer_jax.run import loop as train
from archer_jax.data import dialogues, sources
from archer_jax.data.offline_replay import dataset_env, open_dataset, saved_state
from archer_jax.errors import ConfigError
from archer_jax.run import preflight
from tests.agents.test_offline_app import offline_micro


def games(count: int, turns: int = 1) -> list[dict]:
    """``count`` LMRL-Gym games of ``turns`` lines each, won on the last one (``turns`` transitions each)."""
    lines = [f"Is it thing {t}? No." for t in range(turns - 1)] + ["Is it a dog? Yes."]
    return [{"lines": lines, "correct": True, "word": ["Dog"]} for _ in range(count)]


def episodes(data) -> int:
    return len(np.unique(data.columns["episode"]))


def test_another_dataset_in_the_same_workdir_is_rebuilt_not_reused(tmp_path, caplog):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    dialogues.write_lmrl_20q(first, games(2))
    dialogues.write_lmrl_20q(second, games(5))
    workdir = tmp_path / "run"  # a run that stopped before checkpoint 0 left its build here
    assert episodes(open_dataset(offline_micro(offline__dataset=str(first)), workdir, None)) == 2
    with caplog.at_level(logging.INFO, logger="archer_jax"):
        data = open_dataset(offline_micro(offline__dataset=str(second)), workdir, None)
    assert episodes(data) == 5 and len(data) == 5
    assert any("rebuilding" in r.getMessage() and str(second) in r.getMessage() for r in caplog.records)
    # The same path with other contents is rebuilt too; the same files again are reused.
    dialogues.write_lmrl_20q(second, games(3, turns=2))
    data = open_dataset(offline_micro(offline__dataset=str(second)), workdir, None)
    assert (episodes(data), len(data)) == (3, 6)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="archer_jax"):
        assert len(open_dataset(offline_micro(offline__dataset=str(second)), workdir, None)) == 6
    assert any("reusing" in r.getMessage() for r in caplog.records)
    assert not any("rebuilding" in r.getMessage() for r in caplog.records)


def test_generated_dialogues_follow_the_generate_keys(tmp_path):
    workdir = tmp_path / "run"
    assert episodes(open_dataset(offline_micro(), workdir, None)) == 16  # micro: offline.generate_episodes=16
    assert episodes(open_dataset(offline_micro(offline__generate_episodes=7), workdir, None)) == 7
    assert len(json.loads((workdir / "offline" / "generated" / "train.json").read_text())) == 7


def test_a_checkpoint_refuses_files_that_changed_since(tmp_path):
    path, workdir = tmp_path / "data.json", tmp_path / "run"
    dialogues.write_lmrl_20q(path, games(4))
    c = offline_micro(offline__dataset=str(path))
    open_dataset(c, workdir, None).save(tmp_path / "checkpoint")
    state = saved_state(tmp_path / "checkpoint")
    assert open_dataset(c, workdir, None).resume(state).size == 4  # the same files resume
    changed = games(4)
    changed[0]["word"] = ["Cat"]  # as many transitions as before: only the contents differ
    dialogues.write_lmrl_20q(path, changed)
    build = (dataset_env(c), workdir / "offline" / "tfds")
    before = sources.built_from(*build)
    with pytest.raises(ConfigError, match="files changed since the checkpoint"):
        open_dataset(c, workdir, None, checkpoint=state)  # a resume: refused before its build is touched
    assert sources.built_from(*build) == before
    with pytest.raises(ConfigError) as err:
        open_dataset(c, workdir, None).resume(state)
    message = str(err.value)
    assert message.startswith("config.offline.dataset: the dataset's files changed since the checkpoint") and "\n" not in message


BAD_FILES = {
    # name: (file name, contents, what the message says after "config.offline.dataset: <path>")
    "empty list": ("data.json", "[]", r" holds no games \(an empty JSON list\)$"),
    "not JSON": ("data.json", "{not json", r": not valid JSON \(.*\); each file is a JSON list of LMRL-Gym's"),
    "a dict": ("data.json", '{"lines": []}', r": expected a JSON list of games, got an object; each file is"),
    "missing field": ("data.json", '[{"lines": ["Is it a dog? Yes."], "word": ["Dog"]}]',
                      r": game 0: missing field 'correct'; each file is a JSON list of LMRL-Gym's Twenty Questions games"),
    "Guess My City games": ("data.json", '[{"conversation": ["Is it in Asia? Yes."], "done": true, "word": "tokyo,japan"}]',
                            r": game 0: missing field 'lines'"),
    "not a .json file": ("data.txt", json.dumps(games(1)), r" is not a .json file \(give a .json dialogue file"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_dataset_files_are_one_line_naming_the_key_and_the_users_file(name, tmp_path):
    file_name, text, message = BAD_FILES[name]
    path = tmp_path / file_name
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        preflight.check(offline_micro(offline__dataset=str(path)), tmp_path / "run")
    line = str(err.value)
    assert line.startswith(f"config.offline.dataset: {path}") and "\n" not in line, line
    assert re.search(message, line.removeprefix(f"config.offline.dataset: {path}")), line
    assert "offline/given" not in line


def test_bad_files_in_a_directory_and_a_missing_split_are_named(tmp_path):
    directory = tmp_path / "lmrl"
    dialogues.write_lmrl_20q(directory / "train.json", games(2))
    (directory / "eval.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=rf"^config.offline.dataset: {directory}/eval.json: game 0: expected an object"):
        preflight.check(offline_micro(offline__dataset=str(directory)), tmp_path / "run")
    (directory / "eval.json").unlink()
    with pytest.raises(ConfigError, match=rf"^config.offline.split: {directory} has no eval file"):
        preflight.check(offline_micro(offline__dataset=str(directory), offline__split="eval"), tmp_path / "run")
    with pytest.raises(ConfigError, match=r"^config.offline.split: the generated dialogues .* have a train split only"):
        preflight.check(offline_micro(offline__split="eval"), tmp_path / "run")
    preflight.check(offline_micro(offline__dataset=str(directory)), tmp_path / "run")  # a good one passes


def test_a_bad_dataset_stops_the_run_before_anything_is_built(tmp_path, monkeypatch):
    def built(*args, **kwargs):
        raise AssertionError("the run's parts were built before the bad dataset was reported")

    monkeypatch.setattr(train, "Parts", built)
    path = tmp_path / "data.json"
    path.write_text("{}")
    with pytest.raises(ConfigError, match=rf"^config.offline.dataset: {path}: expected a JSON list of games, got an object"):
        train.train_and_evaluate(offline_micro(offline__dataset=str(path)), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_full_game_dataset_on_the_subset_env_is_said_in_one_line(tmp_path, caplog):
    path = tmp_path / "full.json"
    full = [dict(g, word=["Apple"], lines=["Is it an apple? Yes."]) for g in games(2)] + games(1)
    dialogues.write_lmrl_20q(path, full)
    config = offline_micro(offline__dataset=str(path))
    assert config.env.name == "twenty_questions_subset"
    with caplog.at_level(logging.WARNING):
        open_dataset(config, tmp_path / "run", None)
    warned = [r.getMessage() for r in caplog.records if "outside twenty_questions_subset" in r.getMessage()]
    assert warned == [f"offline dataset {path}: 2 of its 3 games hide an object outside twenty_questions_subset's 10 "
                      "(e.g. 'Apple'): it was made for the full game (env.name=twenty_questions), and this run "
                      "evaluates on the subset"]
    caplog.clear()
    dialogues.write_lmrl_20q(path, games(3))  # the subset's objects only: nothing to say
    with caplog.at_level(logging.WARNING):
        open_dataset(config, tmp_path / "run2", None)
    assert not [r for r in caplog.records if "outside" in r.getMessage()]
