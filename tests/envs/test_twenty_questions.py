"""Twenty Questions: rules, the embedded oracle's grammar, bad actions, the scripted experts."""

import statistics

import pytest

from archer_jax.envs import experts
from archer_jax.envs import twenty_questions as tq
from archer_jax.envs.base import EnvError
from archer_jax.envs.oracle import INVALID, NO, YES


@pytest.fixture(scope="module")
def oracle():
    return tq.KnowledgeBaseOracle()


def play(env, questions):
    return [env.step(q) for q in questions]


def test_observation_format_rewards_and_a_win():
    env = tq.TwentyQuestions()
    assert env.reset(word="Dog") == "Questions:\n"
    first, second = play(env, ["Is it an animal?", "Is it a dog?"])
    assert first.observation == "Questions:\nIs it an animal? Yes.\n"
    assert (first.reward, first.done, first.info.success) == (-1.0, False, False)
    assert second.observation.endswith("Is it a dog? Yes.\n")
    assert (second.reward, second.done, second.info.success, second.info.truncated) == (0.0, True, True, False)
    assert second.terminal


@pytest.mark.parametrize(
    "word, question",
    [
        ("Airplane", "Is it a plane?"),
        ("Airplane", "is it an airplane"),
        ("Pants", "Is it a pair of pants?"),
        ("Pants", "Is it a pant?!"),
        ("Television", "Is it a TV?"),
        ("Pliers", "Is it a pair of pliers..."),
        ("Soccer ball", "Is the object a soccer ball?"),
        ("Dog", "is it a dog ?"),
    ],
)
def test_synonyms_case_and_trailing_punctuation_win(word, question):
    env = tq.TwentyQuestions()
    env.reset(word=word)
    result = env.step(question)
    assert result.info.success and result.reward == 0.0 and result.done


def test_win_only_on_a_yes_and_on_the_last_word():
    env = tq.TwentyQuestions()
    env.reset(word="Cat")
    wrong = env.step("Is it a dog?")
    assert wrong.observation.endswith("Is it a dog? No.\n") and not wrong.done and wrong.reward == -1.0
    negated = env.step("Is it not a cat?")  # ends with the name, but not a yes
    assert not negated.info.success and negated.reward == -1.0
    named_inside = env.step("Is it a cat or a dog?")
    assert named_inside.observation.endswith(f"? {INVALID}\n") and named_inside.info.invalid


def test_twenty_turns_end_the_game():
    """The dialogue shows every turn, so the limit is a rule of the game: its last transition is
    terminal (as in the official code), not a cut."""
    env = tq.TwentyQuestions()
    env.reset(word="Banana")
    results = play(env, ["Is it blue?"] * 20)
    assert [r.done for r in results] == [False] * 19 + [True]
    assert [r.info.at_limit for r in results] == [False] * 19 + [True]
    assert results[-1].terminal and not results[-1].info.truncated and not results[-1].info.success
    assert sum(r.reward for r in results) == -20
    with pytest.raises(EnvError, match=r"^TwentyQuestions: step\(\) after the episode ended .*call reset\(\) first"):
        env.step("Is it a banana?")


@pytest.mark.parametrize(
    "action",
    ["", "   ", "x" * 10_240, "🐶🐶🐶?", "Is it a 🐶?", "\x00\x07Is it\x1b alive?\r\n", "Est-ce un chien ?", "Is it a dog or a cat?", "?" * 50],
)
def test_bad_actions_get_an_answer_never_an_exception(action):
    env = tq.TwentyQuestions()
    env.reset(seed=0)
    result = env.step(action)
    assert result.observation.count("\n") == 2  # the question stays on one line
    assert result.observation.rstrip("\n").endswith((YES, NO, INVALID))
    assert result.reward == -1.0


def test_control_characters_and_emoji_do_not_hide_a_valid_question(oracle):
    assert oracle.answer("Dog", "\x00Is it\x1b alive?🐶") == YES


def test_reset_seed_picks_reproducibly_and_subset_has_ten_objects():
    env = tq.TwentyQuestions()
    assert env.reset(seed=3) == "Questions:\n" and env.secret == (env.reset(seed=3), env.secret)[1]
    subset = tq.TwentyQuestionsSubset()
    seen = {(subset.reset(seed=s), subset.secret.name)[1] for s in range(200)}
    assert seen == set(tq.SUBSET)


def test_every_attribute_phrasing_and_category_phrase_parses(oracle):
    for attr in tq.attributes():
        for phrase in (attr.question, *attr.paraphrases):
            assert oracle.parse(phrase) == ("attribute", attr.name), phrase
    for category, phrases in tq.CATEGORY_PHRASES.items():
        members = {o.name for o in tq.objects() if o.category == category}
        for phrase in phrases:
            kind, value = oracle.parse(f"Is it a {phrase}?")
            # A phrasing an attribute also claims must mean the same set of objects.
            assert value == category if kind == "category" else {o.name for o in tq.objects() if o.facts[value]} == members
    assert oracle.answer("Violin", "Is it a musical instrument?") == YES
    assert oracle.answer("Violin", "Is it a kind of fruit?") == NO


def test_every_object_and_synonym_is_guessable(oracle):
    for obj in tq.objects():
        for name in obj.names:
            assert oracle.answer(obj.name, f"Is it a {name}?") == YES, name
            env = tq.TwentyQuestions()
            env.reset(word=obj.name)
            assert env.step(f"Is it a {name}?").info.success, name


def test_optimal_expert_wins_every_object_in_under_12_turns_on_average():
    player = experts.expert("optimal")
    turns = []
    for obj in tq.objects():
        env = tq.TwentyQuestions()
        obs = env.reset(word=obj.name)
        result = None
        while result is None or not result.done:
            result = env.step(player.act(obs))
            obs = result.observation
        assert result.info.success, (obj.name, obs)
        turns.append(env.turn)
    print(f"optimal expert: mean {statistics.mean(turns):.2f} turns, max {max(turns)} over {len(turns)} objects")
    assert statistics.mean(turns) < 12


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_weaker_experts_leave_room_to_improve():
    def mean_return(kind):
        returns = []
        for i, obj in enumerate(tq.objects()[::4]):
            player = experts.expert(kind, seed=i)
            env = tq.TwentyQuestions()
            obs, total, done = env.reset(word=obj.name), 0.0, False
            while not done:
                result = env.step(player.act(obs))
                obs, total, done = result.observation, total + result.reward, result.done
            returns.append(total)
        return statistics.mean(returns)

    optimal = mean_return("optimal")
    for kind in ("random_order", "redundant", "early_guesser"):
        assert mean_return(kind) < optimal - 0.5, kind
