"""Dialogues played by the scripted experts: the files read back, the mix, the seed, the CLI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from archer_jax.data import dialogues, generate
from archer_jax.envs import experts

ROOT = Path(__file__).resolve().parents[2]


def success_by_kind(games, won_key):
    kinds = {g["expert"] for g in games}
    return {k: sum(g[won_key] for g in games if g["expert"] == k) / sum(g["expert"] == k for g in games) for k in kinds}


@pytest.fixture(scope="module")
def twenty(tmp_path_factory):
    games = generate.generate("20q", 80, "optimal:1,random:1", seed=0)
    path = generate.write("20q", games, tmp_path_factory.mktemp("gen") / "20q.json")
    return games, path


def test_20q_file_reads_back(twenty):
    games, path = twenty
    read = dialogues.read_lmrl_20q(path)
    assert read == games and len(read) == 80
    assert all(line.endswith((" Yes.", " No.")) for g in read for line in g["lines"])
    assert all(set(g) == {"lines", "correct", "word", "expert"} for g in read)
    for game in read:
        transitions = dialogues.lmrl_20q_transitions(game)
        assert 1 <= len(transitions) <= 20
        ret = transitions[0]["episode_return"]
        assert -20 <= ret <= 0 and ret == -(len(game["lines"]) - game["correct"])
        assert transitions[-1]["terminal"] == game["correct"]


def test_20q_experts_success(twenty):
    games, _ = twenty
    success = success_by_kind(games, "correct")
    assert set(success) == {"optimal", "random"}
    assert success["optimal"] >= 0.95
    assert success["random"] < success["optimal"] - 0.3


def test_same_seed_same_file(tmp_path, twenty):
    games, path = twenty
    again = generate.write("20q", generate.generate("20q", 80, "optimal:1,random:1", seed=0), tmp_path / "again.json")
    assert again.read_bytes() == path.read_bytes()
    assert generate.generate("20q", 80, "optimal:1,random:1", seed=1) != games


def test_max_turns_and_subset():
    games = generate.generate("20q_subset", 20, "random:1", seed=3, max_turns=5)
    assert all(len(g["lines"]) <= 5 for g in games)
    assert all(len(g["lines"]) == 5 for g in games if not g["correct"])


def test_city(tmp_path):
    games = generate.generate("city", 40, {"optimal": 3, "random": 1}, seed=0)
    path = generate.write("city", games, tmp_path / "city.json")
    read = dialogues.read_city_dialogues(path)
    assert read == games
    for game in read:
        assert all(entry.endswith(("? Yes.", "? No.")) and entry.count("?") == 1 for entry in game["conversation"])
        transitions = dialogues.city_transitions(game)
        assert len(transitions) == len(game["conversation"])  # the env ends the game at the win
        assert transitions[-1]["success"] == game["done"]
        assert -20 <= transitions[0]["episode_return"] <= 0
    success = success_by_kind(read, "done")
    assert success["optimal"] >= 0.95 and success["random"] < success["optimal"]


def test_policy_mix():
    assert generate.parse_policy_mix("optimal:1, random:3") == {"optimal": 0.25, "random": 0.75}
    assert generate.parse_policy_mix({"redundant": 2, "random": 0}) == {"redundant": 1.0}
    for mix, message in [
        ("optimal:1,clever:1", "unknown expert kind 'clever'"),
        ("optimal:x", "expert kind 'optimal' has weight 'x', not a number"),
        ("random:-1", "expert kind 'random' has weight '-1'"),
        ("random:nan", "expert kind 'random' has weight 'nan'"),
        ("optimal", "'optimal' is not kind:weight"),
        ("optimal:1,optimal:2", "expert kind 'optimal' given twice"),
        ("optimal:0", "gives no expert kind a positive weight"),
    ]:
        with pytest.raises(ValueError, match=message):
            generate.parse_policy_mix(mix)


def test_random_expert_is_registered():
    assert experts.EXPERTS["random"] == {"random_questions": True}
    player = experts.expert("random", seed=0)
    assert player.random_questions and not experts.expert("optimal").random_questions


def test_cli_bad_kind_is_one_line(tmp_path, capsys):
    code = generate.main(["--env=20q", "--episodes=2", "--policy_mix=optimal:1,clever:1", f"--out={tmp_path / 'x.json'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'clever'" in err
    assert not (tmp_path / "x.json").exists()


def test_cli_writes_the_file(tmp_path):
    out = tmp_path / "data" / "train.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--env=20q_subset", "--episodes=12", "--policy_mix=optimal:0.5,redundant:0.5", f"--out={out}", "--seed=7"]
    result = subprocess.run([sys.executable, "-m", "archer_jax.data.generate", *args], capture_output=True, text=True,
                            cwd=ROOT, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("12 20q_subset episodes; ") and "optimal: " in last and str(out) in last
    assert len(dialogues.read_lmrl_20q(out)) == 12


@pytest.mark.parametrize("episodes", ["0", "-3"])
def test_cli_no_episodes_is_one_line(episodes, tmp_path, capsys):
    code = generate.main(["--env=20q", f"--episodes={episodes}", f"--out={tmp_path / 'x.json'}"])
    err = capsys.readouterr().err
    assert code == 2 and err == f"error: --episodes: must be >= 1 (a dataset of no dialogues trains nothing), got {episodes}\n"
    assert not (tmp_path / "x.json").exists()
