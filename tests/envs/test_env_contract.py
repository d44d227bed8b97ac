"""The env contract of archer_jax/envs/base.py (issue 19, item 8), across the five envs: a step
before reset() or after the episode ended raises EnvError naming the env; texts that reach the
learner (observations, info.extra) are clean, so a ReplayBuffer of them saves; Detective marks
parser complaints as invalid. Detective needs jericho and ../shared/data/detective.z5 (its cases
skip, saying so, without them); WebShop runs against the local stand-in server."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import pytest

from archer_jax import rollout
from archer_jax.envs.base import EnvError, StepResult, clean_text, reset_env, step_env
from archer_jax.envs.guess_my_city import GuessMyCity
from archer_jax.envs.pool import EnvPool
from archer_jax.envs.twenty_questions import TwentyQuestions, TwentyQuestionsSubset
from archer_jax.replay import ReplayBuffer
from tests.envs.fake_webshop import serve, shop

GAME = Path(__file__).resolve().parents[3] / "shared/data/detective.z5"
ENVS = ["twenty_questions", "twenty_questions_subset", "guess_my_city", "detective", "webshop"]
NAMES = dict(twenty_questions="TwentyQuestions", twenty_questions_subset="TwentyQuestionsSubset",
             guess_my_city="GuessMyCity", detective="Detective", webshop="WebShop")
# Control characters (NUL, BEL, ESC, DEL, a C1 NEL), a carriage return, tab and newline, a lone surrogate.
DIRT = "nul\x00 bel\x07 esc\x1b[31m del\x7f nel\x85 cr\r\n tab\t surrogate\ud800 end"
CLEAN = "nul bel esc[31m del nel cr\n tab\t surrogate\ufffd end"
FORBIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
# The webshop stand-in's goals carry control characters in their instruction.
INSTRUCTION = "i need a \x07blue\x1b shirt\x0b in size m, and price lower than 30.00 dollars"


@pytest.fixture(scope="module")
def webshop_url():
    with serve(shop([INSTRUCTION] * 3)) as url:
        yield url


def _detective_or_skip():
    pytest.importorskip("jericho", reason='jericho is not installed (pip install -e ".[detective]")')
    pytest.importorskip("spacy", reason='spacy is not installed (pip install -e ".[detective]")')
    if not GAME.is_file():
        pytest.skip(f"game file {GAME} is absent (shared/data beside the repository)")
    from archer_jax.envs.detective import Detective

    return Detective


def _factory(request, name: str, max_turns: int):
    """A picklable factory of env ``name`` whose episodes end after ``max_turns`` steps."""
    if name == "twenty_questions":
        return functools.partial(TwentyQuestions, max_turns=max_turns)
    if name == "twenty_questions_subset":
        return functools.partial(TwentyQuestionsSubset, max_turns=max_turns)
    if name == "guess_my_city":
        return functools.partial(GuessMyCity, max_turns=max_turns)
    if name == "detective":
        return functools.partial(_detective_or_skip(), GAME, max_steps=max_turns, list_valid_actions=False)
    from archer_jax.envs.webshop import WebShop

    url = request.getfixturevalue("webshop_url")
    return functools.partial(WebShop, url, max_steps=max_turns, train_goals=(0, 3), eval_goals=(0, 3))


ACTION = {"detective": "look", "webshop": "search[shirt]"}


class Dirty:
    """Wraps an env and dirties what it returns (as a user's env or a game's text might)."""

    def __init__(self, make_env):
        self.env = make_env()

    def reset(self, seed=None):
        return self.env.reset(seed) + DIRT

    def step(self, action: str) -> StepResult:
        result = self.env.step(action)
        extra = dict(result.info.extra, note=DIRT, notes=[DIRT, 1])
        return result._replace(observation=result.observation + DIRT, info=dataclasses.replace(result.info, extra=extra))


# -- step before reset, step after the end ------------------------------------------------------


@pytest.mark.parametrize("name", ENVS)
def test_step_out_of_order_raises_an_env_error_naming_the_env(request, name):
    make = _factory(request, name, max_turns=2)
    action, env_name = ACTION.get(name, "Is it an animal?"), NAMES[name]
    env = make()
    with pytest.raises(EnvError, match=rf"^{env_name}: step\(\) before reset\(\); call reset\(\) first$"):
        env.step(action)
    env.reset(seed=3)
    results = [env.step(action), env.step(action)]
    assert [r.done for r in results] == [False, True] and results[-1].info.at_limit
    for _ in range(2):  # every later step, not only the first
        with pytest.raises(EnvError, match=rf"^{env_name}: step\(\) after the episode ended \(done=True\); call reset\(\) first$"):
            env.step(action)
    env.reset(seed=3)  # reset() starts over
    assert not env.step(action).done

    with EnvPool(make, num_envs=2) as pool:  # the pool says the same, naming the env and its index
        with pytest.raises(EnvError, match=rf"^env 0 \({env_name}\): step\(\) before reset\(\)"):
            pool.step([action, None])
        pool.reset([3, 4])
        pool.step([action, action])
        assert all(r.done for r in pool.step([action, action]))
        with pytest.raises(EnvError, match=rf"^env 1 \({env_name}\): step\(\) after the episode ended"):
            pool.step([None, action])
        pool.reset([5], indices=[1])
        assert pool.step([None, action])[1] is not None


# -- clean texts --------------------------------------------------------------------------------


def _assert_clean(text: str) -> None:
    assert isinstance(text, str) and not FORBIDDEN.search(text), repr(FORBIDDEN.search(text))
    text.encode("utf-8")


@pytest.mark.parametrize("name", ENVS)
def test_texts_are_clean_at_the_boundary_and_a_replay_buffer_of_them_saves(request, name, tmp_path):
    make = functools.partial(Dirty, _factory(request, name, max_turns=3))
    # The question games echo the question, control characters and all. (Actions come from the
    # sampler's decoding, which makes no surrogates: the dirt of the replay's action column is this.)
    action = ACTION.get(name, "Is it\x07 an animal\x1b?")
    with EnvPool(make, num_envs=2) as pool:
        episodes = rollout.play(pool, lambda obs, turn, games: [action] * len(obs), seeds=[1, 2], max_turns=3)
        results = pool.step([None, None])
        assert results == [None, None]
        pool.reset([1], indices=[0])
        result = pool.step([action, None])[0]
    texts = [t for e in episodes for t in e.observations + e.next_observations]
    assert len(texts) == 12
    for text in texts:
        _assert_clean(text)
        assert CLEAN in text  # control characters dropped, \r\n -> \n, tab and newline kept, U+FFFD
    assert result.info.extra["note"] == CLEAN and result.info.extra["notes"] == [CLEAN, 1]
    if name in ("twenty_questions", "twenty_questions_subset", "guess_my_city"):
        assert "Is it an animal?" in texts[-1]  # the env's own echo of the action, cleaned
    if name == "webshop":
        assert "i need a blue shirt in size m" in texts[0]  # the server's page text, cleaned

    replay = ReplayBuffer(capacity=32)
    replay.add(
        observation=[o for e in episodes for o in e.observations],
        action=[a for e in episodes for a in e.actions],
        reward=[r for e in episodes for r in e.rewards],
        next_observation=[o for e in episodes for o in e.next_observations],
        terminal=[float(t) for e in episodes for t in e.terminals],
    )
    replay.save(tmp_path)
    restored = ReplayBuffer.restore(tmp_path)
    assert len(restored) == len(replay) == 6
    for column in ("observation", "action", "next_observation"):
        assert restored.gather(range(6))[column] == replay.gather(range(6))[column]


def test_the_boundary_is_what_cleans(tmp_path):
    """Without it the dirt reaches the buffer, and saving fails: the bug of issue 19."""
    raw = Dirty(TwentyQuestions)
    observation = raw.reset(seed=0)
    assert "\ud800" in observation and "\x07" in observation
    replay = ReplayBuffer(capacity=4)
    replay.add(observation=[observation], reward=[0.0])
    with pytest.raises(UnicodeEncodeError):
        replay.save(tmp_path / "raw")
    assert reset_env(Dirty(TwentyQuestions), 0) == "Questions:\n" + CLEAN
    env = Dirty(TwentyQuestions)
    env.reset(0)
    assert step_env(env, "Is it alive?").observation.endswith(CLEAN)
    env = TwentyQuestions()  # an env's own echo of an action
    env.reset(seed=0)
    assert "Is it\x07 alive\ud800?" in env.step("Is it\x07 alive\ud800?").observation
    env.reset(seed=0)
    assert "Is it alive\ufffd?" in step_env(env, "Is it\x07 alive\ud800?").observation


def test_clean_text():
    assert clean_text(DIRT) == CLEAN
    assert clean_text("tabs\tand\nnewlines stay; so do é, 中, 🛒 and U+FFFD \ufffd") == (
        "tabs\tand\nnewlines stay; so do é, 中, 🛒 and U+FFFD \ufffd")
    assert clean_text("a\rb\r\nc") == "a\nb\nc"
    assert clean_text("\ud83d\ude00") == "\ufffd\ufffd"  # a surrogate pair in a str is two lone surrogates
    with pytest.raises(TypeError):
        clean_text(b"bytes")  # type: ignore[arg-type]


def test_an_env_that_returns_no_step_result_is_an_env_error():
    class Tuple:
        def reset(self, seed=None):
            return "start"

        def step(self, action):
            return ("obs", 0.0, False, {})

    env = Tuple()
    with pytest.raises(EnvError, match=r"^Tuple\.step\(\) returned tuple, not a StepResult"):
        step_env(env, "x")


# -- Detective's invalid actions ----------------------------------------------------------------


def test_detective_marks_an_unknown_verb_invalid():
    Detective = _detective_or_skip()
    env = Detective(GAME, list_valid_actions=False)
    env.reset()
    result = env.step("florp")
    assert "That's not a verb I recognise." in result.observation
    assert result.info.invalid and not result.done
    assert not env.step("take paper").info.invalid  # a command the game takes


def test_understood():
    from archer_jax.envs.detective import understood

    assert not understood("\nThat's not a verb I recognise.\n")  # jericho's own check misses this one
    assert not understood("That's not a verb I recognize.")
    assert understood("Taken.") and understood("\nYou can't go that way.\n")
    jericho = pytest.importorskip("jericho.defines", reason='jericho is not installed (pip install -e ".[detective]")')
    assert not understood('\nI don\'t know the word "florp".\n', jericho.UNRECOGNIZED_REGEXPS)
    assert understood("\nTaken.\n", jericho.UNRECOGNIZED_REGEXPS)
