"""Detective through jericho (docs/algorithms.md, section 12): walkthrough, observation, limits, bad actions."""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from archer_jax.envs.base import EnvError, StepResult
from archer_jax.envs import detective
from archer_jax.envs.detective import BLOCKED_REPLY, NO_RESPONSE_REPLY, Detective, sanitize_action

GAME = Path(__file__).resolve().parents[3] / "shared/data/detective.z5"


@pytest.fixture(scope="module")
def jericho():
    mod = pytest.importorskip("jericho", reason='jericho is not installed (pip install -e ".[detective]")')
    pytest.importorskip("spacy", reason='spacy is not installed (pip install -e ".[detective]")')
    if not GAME.is_file():
        pytest.skip(f"game file {GAME} is absent (shared/data beside the repository)")
    return mod


def _sections(obs: str) -> dict[str, str]:
    out, key = {}, None
    for line in obs.split("\n"):
        for name in ("Location:", "Inventory:", "Last:", "Valid actions:"):
            if line.startswith(name):
                key = name[:-1]
                out[key] = line[len(name):].strip()
                break
        else:
            out[key] += ("\n" if out[key] else "") + line
    return {k: v.strip() for k, v in out.items()}


def test_walkthrough_scores_360(jericho):
    walkthrough = jericho.FrotzEnv(str(GAME)).get_walkthrough()
    assert walkthrough
    env = Detective(GAME, max_steps=len(walkthrough) + 10, list_valid_actions=False)
    assert env.get_walkthrough() == walkthrough
    env.reset()
    total, result = 0.0, None
    for i, action in enumerate(walkthrough):
        assert result is None or not result.done, f"ended early at step {i}"
        result = env.step(action)
        total += result.reward
    assert total == 360.0
    assert result.done and result.terminal
    assert result.info.success and not result.info.truncated
    assert result.info.extra["score"] == result.info.extra["max_score"] == 360
    # Past the end: an error saying to reset (the env contract), and the game is left as it was.
    with pytest.raises(EnvError, match=r"^Detective: step\(\) after the episode ended .*call reset\(\) first$"):
        env.step("look")


def test_observation_sections_and_turn_free_look(jericho):
    env = Detective(GAME)
    obs = env.reset()
    s = _sections(obs)
    assert list(s) == ["Location", "Inventory", "Last", "Valid actions"]
    assert "Chief's office" in s["Location"] and "white paper" in s["Location"]
    assert s["Inventory"] == "You are carrying nothing."
    assert "Matt Barringer" in s["Last"]
    assert "take paper" in s["Valid actions"].split(", ")

    raw = jericho.FrotzEnv(str(GAME))
    raw.reset()
    result = env.step("take paper")
    raw.step("take paper")
    s = _sections(result.observation)
    assert "white paper" in s["Inventory"] and "carrying nothing" not in s["Inventory"]
    assert s["Last"].startswith("Taken.")
    assert result.reward == 20.0  # the game's opening 10 points come with the first step
    # Observing (look, inventory, valid-action search) spent no turn and no score.
    assert result.info.extra["moves"] == raw.get_moves() == 2
    assert result.info.extra["score"] == raw.get_score() == 20
    assert result.info.extra["valid_actions"] == s["Valid actions"].split(", ")
    look = env.step("look")
    assert _sections(look.observation)["Last"] == s["Location"]
    assert look.info.extra["moves"] == 3 and look.reward == 0.0


def test_valid_action_search_leaves_the_game_alone(jericho):
    walkthrough = jericho.FrotzEnv(str(GAME)).get_walkthrough()[:10]
    listed, plain = Detective(GAME), Detective(GAME, list_valid_actions=False)
    assert "Valid actions:" not in plain.reset()
    listed.reset()
    for action in walkthrough:
        a, b = listed.step(action), plain.step(action)
        assert a.info.extra["valid_actions"] and not b.info.extra["valid_actions"]
        assert a.observation.startswith(b.observation + "\n\nValid actions: ")
        assert (a.reward, a.info.extra["moves"], a.info.extra["score"]) == (
            b.reward, b.info.extra["moves"], b.info.extra["score"])
    listed.close()
    assert listed.reset() == Detective(GAME).reset()  # close, then a fresh emulator


def test_max_steps_end_the_game(jericho):
    env = Detective(GAME, max_steps=3)
    env.reset()
    results = [env.step("wait") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    last = results[-1]
    assert last.info.at_limit and last.terminal and not last.info.truncated and not last.info.success
    assert last.info.extra["steps"] == 3
    with pytest.raises(EnvError, match="after the episode ended"):
        env.step("north")


def test_death_ends_the_episode(jericho):
    env = Detective(GAME, list_valid_actions=False)
    env.reset()
    results = [env.step(a) for a in ("north", "west", "north")]  # into the restaurant unarmed
    assert [r.done for r in results] == [False, False, True]
    last = results[-1]
    assert last.terminal and not last.info.success and not last.info.truncated
    assert "You have died" in _sections(last.observation)["Last"]


BAD_ACTIONS = [
    "",
    "   ",
    "x" * 10_240,
    "examine " + "paper " * 2000,
    "\U0001f575\ufe0f examine paper \U0001f4dd",
    "pr\u00fcfe den Schl\u00fcssel",
    "\u4e0a",
    "\x00",  # hangs the bare emulator
    "examine paper\x00\nw",  # a newline would send two commands
    "\x1b[A\x07\x7f\r\t",
    "\\help",  # the interpreter's own escapes: \_ is Return, \X its hotkeys
    "examine paper\\_w\\X",
    "w. e. n",
    "w, e",
    "w then e",
    "help",  # a menu that swallows every later command
    "quit",
    "restart",
    "save",  # writes a file in the working directory
    "script",
    "recording on",
    "purloin note",  # debugging verb: a scored object for free
    "abstract gun to me",
]


def test_bad_actions_never_raise(jericho, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = Detective(GAME, max_steps=1000)
    env.reset()
    moves = 1
    for action in BAD_ACTIONS:
        t0 = time.perf_counter()
        result = env.step(action)
        assert isinstance(result, StepResult) and isinstance(result.observation, str)
        assert not result.done and time.perf_counter() - t0 < 5.0, repr(action[:40])
        spent = result.info.extra["moves"] - moves
        assert spent in (0, 1), f"{action[:40]!r} ran {spent} moves"
        moves = result.info.extra["moves"]
        assert result.info.extra["score"] == 10, f"{action[:40]!r} scored"
        assert "carrying nothing" in _sections(result.observation)["Inventory"], repr(action[:40])
        assert len(result.info.extra["action"]) <= 120
        if not sanitize_action(action):
            assert result.info.invalid
    for action in ("help", "quit", "save", "purloin note"):
        assert _sections(env.step(action).observation)["Last"] == BLOCKED_REPLY
    assert list(tmp_path.iterdir()) == []  # no save / transcript / recording files
    # The game still plays normally afterwards ("w. e. n" etc. each went west once: the closet).
    assert "Closet" in _sections(env.step("look").observation)["Location"]
    env.step("e")
    result = env.step("take paper")
    assert result.reward == 10.0 and not result.info.invalid
    assert "white paper" in _sections(result.observation)["Inventory"]


def test_sanitize_action():
    assert sanitize_action("  Take   Paper. then w ") == "Take Paper"
    assert sanitize_action("go\x00 north\nsouth") == "go north south"
    assert sanitize_action("\\help x\\_y") == "help x _y"
    assert sanitize_action("\u00e9l\u00e8ve n") == "l ve n"
    assert sanitize_action("x" * 10_000) == "x" * 120
    assert sanitize_action("take" + " paper" * 100) == "take" + " paper" * 15
    assert sanitize_action("") == ""


def test_halted_emulator_is_undone(jericho, monkeypatch):
    # Without the word cap, 25 words overflow one of the game's arrays and halt the emulator.
    monkeypatch.setattr(detective, "MAX_ACTION_WORDS", 1000)
    env = Detective(GAME, list_valid_actions=False)
    env.reset()
    result = env.step("take" + " paper" * 24)
    assert _sections(result.observation)["Last"] == NO_RESPONSE_REPLY
    assert result.info.invalid and not result.done and result.info.extra["moves"] == 1
    assert result.reward == 10.0  # the opening points, as on any first step
    result = env.step("take paper")
    assert result.reward == 10.0 and not result.done and result.info.extra["score"] == 20


def test_reset_is_repeatable(jericho):
    env = Detective(GAME)
    first = env.reset()
    env.step("take paper")
    env.step("w")
    assert env.reset() == first
    assert env.reset(seed=0) == first
    assert Detective(GAME).reset() == first
    result = env.step("take paper")
    assert result.reward == 20.0 and result.info.extra["steps"] == 1
    clone = pickle.loads(pickle.dumps(env))  # the emulator stays behind; reset makes a new one
    assert clone.reset() == first


def test_step_before_reset(jericho):
    with pytest.raises(EnvError, match=r"^Detective: step\(\) before reset\(\); call reset\(\) first$"):
        Detective(GAME).step("look")
    env = Detective(GAME)
    env.get_walkthrough()  # makes the emulator, but starts no episode
    with pytest.raises(EnvError, match="before reset"):
        env.step("look")


def test_missing_game_file(tmp_path):
    missing = tmp_path / "nowhere" / "detective.z5"
    with pytest.raises(EnvError) as err:
        Detective(missing)
    message = str(err.value)
    assert str(missing) in message and "\n" not in message


def test_missing_jericho_says_how_to_install(tmp_path, monkeypatch):
    game = tmp_path / "game.z5"
    game.write_bytes(b"\0" * 64)
    monkeypatch.setitem(sys.modules, "jericho", None)
    monkeypatch.setitem(sys.modules, "jericho.util", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[detective\]"'):
        Detective(game)


def test_valid_actions_when_ctypes_util_was_imported_first(jericho):
    # jericho's package namespace takes ``from ctypes import *``: once ctypes.util is imported
    # (many libraries do), ``jericho.util`` names ctypes.util, and a spaCy patch set through that
    # attribute missed jericho's real util module, which then tried to download en_core_web_sm.
    script = (
        "import ctypes.util, socket, sys\n"
        "def no_network(*a, **k): raise OSError('network used')\n"
        "socket.getaddrinfo = socket.create_connection = no_network\n"
        "from archer_jax.envs.detective import Detective\n"
        f"env = Detective({str(GAME)!r})\n"
        "env.reset()\n"
        "print(len(env.step('take paper').info.extra['valid_actions']))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 0
