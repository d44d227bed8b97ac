"""The TFDS builders and the learners' API: build array_record from a few games, read them back without TensorFlow."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from archer_jax.data import dialogues, sources
from archer_jax.data.guess_my_city import GuessMyCity
from archer_jax.data.twenty_questions import TwentyQuestions

ROOT = Path(__file__).resolve().parents[2]
SHARED_CITY = Path(__file__).resolve().parents[3] / "shared/data/guess_my_city.json"

TRAIN_A = [  # train.json
    {"lines": ["Is it an animal? Yes.", "Does it bark? Yes.", "Is it a dog? Yes."], "correct": True, "word": ["Dog"]},
    {"lines": ["Is it an animal? No.", "Is it a fruit? No."], "correct": False, "word": ["Piano"]},
]
TRAIN_B = [  # train_more.json: its games continue the split's episode count
    {"lines": ["Is it a banana? Yes."], "correct": True, "word": ["Banana", "Bananas"]},
]
EVAL = [  # eval.json
    {"lines": ["Is it a vehicle? Yes.", "Is it a truck? Yes."], "correct": True, "word": ["Truck"]},
    {"lines": [f"Is it thing {i}? No." for i in range(20)], "correct": False, "word": ["Chair"]},
]


def expected_records(games):
    """(episode, turn) -> the transition, with games numbered in order."""
    return {
        (episode, t["turn"]): {**t, "episode": episode}
        for episode, game in enumerate(games)
        for t in dialogues.lmrl_20q_transitions(game)
    }


@pytest.fixture(scope="module")
def built_20q(tmp_path_factory):
    root = tmp_path_factory.mktemp("twenty_questions")
    manual = root / "manual"
    dialogues.write_lmrl_20q(manual / "train.json", TRAIN_A)
    dialogues.write_lmrl_20q(manual / "train_more.json", TRAIN_B)
    dialogues.write_lmrl_20q(manual / "eval.json", EVAL)
    (manual / "notes.txt").write_text("not a dataset file")
    builder = sources.prepare("20q", manual, root / "data")
    return builder, root


def read_all(source):
    return sources.read_transitions(source, range(len(source)))


def as_records(columns):
    n = len(columns["turn"])
    return {(int(columns["episode"][i]), int(columns["turn"][i])): {k: v[i] for k, v in columns.items()} for i in range(n)}


def test_builder_classes():
    assert issubclass(TwentyQuestions, tfds.core.GeneratorBasedBuilder) and TwentyQuestions.name == "twenty_questions"
    assert issubclass(GuessMyCity, tfds.core.GeneratorBasedBuilder) and GuessMyCity.name == "guess_my_city"
    assert str(TwentyQuestions.VERSION) == str(GuessMyCity.VERSION) == "1.0.0"
    assert "train.json" in TwentyQuestions.MANUAL_DOWNLOAD_INSTRUCTIONS
    assert sources.BUILDERS == {"20q": TwentyQuestions, "20q_subset": TwentyQuestions, "city": GuessMyCity}


def test_train_split_records_decode_and_group_by_episode(built_20q):
    builder, root = built_20q
    assert set(builder.info.splits) == {"train", "eval"}
    source = sources.data_source("20q", root / "data")
    assert len(source) == 3 + 2 + 1
    columns = read_all(source)
    for key in ("observation", "action", "next_observation", "secret"):
        assert all(type(v) is str for v in columns[key])
    dtypes = dict(reward=np.float32, episode_return=np.float32, terminal=np.bool_, success=np.bool_, turn=np.int32,
                  episode=np.int64)
    for key, dtype in dtypes.items():
        assert columns[key].dtype == dtype and columns[key].shape == (6,)
    assert set(columns) == set(dialogues.TRANSITION_KEYS) | {"episode"}
    assert as_records(columns) == expected_records(TRAIN_A + TRAIN_B)
    episode, episode_return = sources.episode_columns(source)
    assert episode.dtype == np.int64 and episode_return.dtype == np.float32
    np.testing.assert_array_equal(episode, columns["episode"])
    np.testing.assert_array_equal(episode_return, columns["episode_return"])
    returns = {int(e): float(r) for e, r in zip(episode, episode_return)}
    assert returns == {0: -2.0, 1: -2.0, 2: 0.0}
    for e in returns:  # each episode's return is the sum of its rewards
        assert columns["reward"][episode == e].sum() == returns[e]
    assert columns["secret"][list(episode).index(2)] == "Banana"


def test_eval_split_and_files(built_20q):
    builder, root = built_20q
    source = sources.data_source("20q", root / "data", split="eval")
    assert len(source) == 22
    columns = read_all(source)
    assert as_records(columns) == expected_records(EVAL)
    assert columns["terminal"].sum() == 1 and columns["turn"].max() == 19
    folder = root / "data" / "twenty_questions" / "1.0.0"
    assert sorted(p.name.split(".array_record")[0] for p in folder.glob("*.array_record*")) == [
        "twenty_questions-eval", "twenty_questions-train"
    ]
    assert (folder / "dataset_info.json").is_file()
    assert sources.read_transitions(source, [])["reward"].shape == (0,)


def test_reading_needs_no_tensorflow(built_20q):
    _, root = built_20q
    script = (
        "import sys\n"
        "from archer_jax.data import sources\n"
        f"src = sources.data_source('20q', {str(root / 'data')!r}, 'eval')\n"
        "cols = sources.read_transitions(src, [0, 1, 2])\n"
        "sources.episode_columns(src)\n"
        "src[3]\n"
        "print(len(src), cols['action'][0] != '', 'tensorflow' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["22", "True", "False"]


def test_second_prepare_reuses_the_built_data(built_20q):
    _, root = built_20q
    folder = root / "data" / "twenty_questions" / "1.0.0"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    builder = sources.prepare("20q_subset", root / "manual", root / "data")  # the same files: not built again
    assert builder.is_prepared() and {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert sources.built_from("20q", root / "data") == sources.fingerprint(root / "manual")


def test_prepare_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="empty holds no .json dialogue file"):
        sources.prepare("20q", empty, tmp_path / "data")
    with pytest.raises(FileNotFoundError, match="missing: manual_dir does not exist"):
        sources.prepare("20q", tmp_path / "missing", tmp_path / "data")
    only_eval = tmp_path / "only_eval"
    dialogues.write_lmrl_20q(only_eval / "test.json", TRAIN_B)
    with pytest.raises(ValueError, match="only_eval has no train file"):
        sources.prepare("20q", only_eval, tmp_path / "data")
    with pytest.raises(ValueError, match="env 'chess': no offline dataset; known: 20q, 20q_subset, city"):
        sources.prepare("chess", empty, tmp_path / "data")
    with pytest.raises(FileNotFoundError, match="twenty_questions dataset is not built"):
        sources.data_source("20q", tmp_path / "data")


def test_malformed_file_is_a_one_line_error_and_nothing_is_built(tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "train.json").write_text(json.dumps([{"lines": ["Is it a dog? Perhaps."], "correct": False, "word": ["Dog"]}]))
    with pytest.raises(ValueError, match=r"train\.json: game 0: line 0 'Is it a dog\? Perhaps\.' ends with neither") as e:
        sources.prepare("20q", manual, tmp_path / "data")
    assert "\n" not in str(e.value)
    assert not sources.builder("20q", tmp_path / "data").is_prepared()


def test_unknown_split(built_20q):
    _, root = built_20q
    with pytest.raises(ValueError, match="has no split 'validation'; splits: "):
        sources.data_source("20q", root / "data", split="validation")


def test_city_builder_small(tmp_path, capfd):
    games = [
        {"conversation": ["Based on it:\n\nIs it in Asia? Yes, it is.", "Is it Tokyo? Yes!", "Is it Kyoto? No."],
         "done": True, "word": "tokyo,japan"},
        {"conversation": ["Is it in Europe? No."], "done": False, "word": "lima,peru"},
    ]
    dialogues.write_city_dialogues(tmp_path / "manual" / "dialogues.json", games)
    dialogues.write_city_dialogues(tmp_path / "manual" / "valid.json", games[1:])
    capfd.readouterr()
    sources.prepare("city", tmp_path / "manual", tmp_path / "data")
    assert "Downloading and preparing" not in capfd.readouterr().out  # TFDS's own lines; the log says it
    columns = read_all(sources.data_source("city", tmp_path / "data"))
    expected = {
        (e, t["turn"]): {**t, "episode": e} for e, g in enumerate(games) for t in dialogues.city_transitions(g)
    }
    assert as_records(columns) == expected and len(expected) == 3
    assert len(sources.data_source("city", tmp_path / "data", "eval")) == 1


@pytest.mark.skipif(not SHARED_CITY.is_file(), reason=f"{SHARED_CITY} is absent")
def test_city_builder_on_the_official_dialogues(tmp_path):
    games = dialogues.read_city_dialogues(SHARED_CITY)
    transitions = [dialogues.city_transitions(g) for g in games]
    assert all(transitions)  # every game converts, to at least one turn
    (tmp_path / "manual").mkdir()
    (tmp_path / "manual" / "train.json").symlink_to(SHARED_CITY)
    sources.prepare("city", tmp_path / "manual", tmp_path / "data")
    source = sources.data_source("city", tmp_path / "data")
    assert len(source) == sum(len(t) for t in transitions)
    episode, episode_return = sources.episode_columns(source)
    assert set(episode.tolist()) == set(range(len(games)))
    assert episode_return.min() >= -20 and episode_return.max() <= 0
    returns = {int(e): float(r) for e, r in zip(episode, episode_return)}
    assert returns == {e: t[0]["episode_return"] for e, t in enumerate(transitions)}
    sample = sources.read_transitions(source, range(0, len(source), 97))
    assert sample["success"].any() and not sample["success"].all()
    pairs = zip(sample["observation"], sample["next_observation"])
    assert all(o.startswith("Questions:\n") and n.startswith(o) for o, n in pairs)
    assert sum(t[-1]["success"] for t in transitions) > len(games) // 2
