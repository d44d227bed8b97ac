"""Guess My City: rules, the oracle's grammar over the city table, bad actions, experts."""

import statistics

import pytest

from archer_jax.envs import experts
from archer_jax.envs import guess_my_city as gmc
from archer_jax.envs.oracle import INVALID, NO, YES


@pytest.fixture(scope="module")
def oracle():
    return gmc.CityOracle()


def test_the_official_91_cities():
    assert len(gmc.cities()) == 91
    assert gmc.city_named("Bombay, India").names[0] == "Mumbai"


@pytest.mark.parametrize(
    "question, expected",
    [
        ("Is it in Asia?", YES),
        ("Is your city located in South Korea?", YES),
        ("Is the city in Europe?", NO),
        ("Is it in the northern hemisphere?", YES),
        ("Is it in the southern hemisphere?", NO),
        ("Is it the capital of its country?", YES),
        ("Is Korean the main language?", YES),
        ("Does it have more than 5 million people?", YES),
        ("Does it have more than twenty million people?", NO),
        ("Does it have a subway?", YES),
        ("Is it in the USA?", NO),
        ("Is it in Narnia?", INVALID),
        ("What is the weather like?", INVALID),
        ("Is it Tokyo?", NO),
        ("Is it Tokyo or Osaka?", INVALID),
    ],
)
def test_grammar_on_seoul(oracle, question, expected):
    assert oracle.answer("Seoul, South Korea", question) == expected


def test_every_attribute_phrasing_parses(oracle):
    for attr in gmc.attributes():
        for phrase in (attr.question, *attr.paraphrases):
            if attr.kind == "bool":
                assert oracle.parse(phrase)[:2] == ("bool", attr.name), phrase
            elif attr.kind == "number":
                assert oracle.parse(phrase.replace("{value}", "7"))[:2] == ("number", attr.name), phrase


def test_rules_win_on_the_name_or_an_alias():
    env = gmc.GuessMyCity()
    assert env.reset(city="Bombay, India") == "Questions:\n"
    first = env.step("Is it in India?")
    assert first.observation == "Questions:\nIs it in India? Yes.\n" and first.reward == -1.0 and not first.done
    won = env.step("Is it Mumbai?")
    assert won.info.success and won.reward == 0.0 and won.done and won.terminal
    env.reset(city="Bombay, India")
    assert env.step("Is your city Bombay?").info.success
    env.reset(city="Lima, Peru")
    assert not env.step("What is the climate like?").info.success  # "lima" inside a word is no win


def test_the_oracle_never_says_a_city_name(oracle):
    answers = {oracle.answer(c.name, q) for c in gmc.cities()[:10] for q in ("Is it in Asia?", "Where is it?")}
    assert answers <= {YES, NO, INVALID}


def test_twenty_turns_end_the_game_and_bad_actions_never_raise():
    env = gmc.GuessMyCity()
    env.reset(seed=1)
    bad = ["", "x" * 10_240, "🏙️?", "\x00\x1bIs it in Asia?\n", "Is it Paris or London?"]
    results = [env.step(a) for a in bad] + [env.step("Is it on the moon?") for _ in range(15)]
    assert all(r.observation.rstrip("\n").endswith((YES, NO, INVALID)) for r in results)
    assert results[-1].done and results[-1].info.at_limit and results[-1].terminal and not results[-1].info.truncated
    assert sum(r.reward for r in results) == -20


def test_optimal_city_expert_wins_every_city():
    player = experts.city_expert("optimal")
    turns = []
    for city in gmc.cities():
        env = gmc.GuessMyCity()
        obs, result = env.reset(city=city.name), None
        while result is None or not result.done:
            result = env.step(player.act(obs))
            obs = result.observation
        assert result.info.success, obs
        turns.append(env.turn)
    print(f"optimal city expert: mean {statistics.mean(turns):.2f} turns, max {max(turns)} over {len(turns)} cities")
    assert statistics.mean(turns) < 12
