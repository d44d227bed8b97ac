"""The file formats and their transitions, against expected transitions written by hand."""

import json

import pytest

from archer_jax.data import dialogues
from archer_jax.envs import guess_my_city as gmc
from archer_jax.envs import twenty_questions as tq


def transition(observation, action, answer, reward, terminal, turn, episode_return, success, secret):
    """One expected transition; next_observation is written out by the caller's observation + line."""
    return dict(
        observation=observation, action=action, next_observation=f"{observation}{action} {answer}\n", reward=reward,
        terminal=terminal, turn=turn, episode_return=episode_return, success=success, secret=secret,
    )


# ---- Twenty Questions (LMRL-Gym) ----------------------------------------------------------------------


def test_correct_game():
    game = {"lines": ["Is it an animal? Yes.", "Does it bark? Yes.", "Is it a dog? Yes."], "correct": True,
            "word": ["Dog", "Puppy"]}
    expected = [
        dict(observation="Questions:\n", action="Is it an animal?",
             next_observation="Questions:\nIs it an animal? Yes.\n",
             reward=-1.0, terminal=False, turn=0, episode_return=-2.0, success=True, secret="Dog"),
        dict(observation="Questions:\nIs it an animal? Yes.\n", action="Does it bark?",
             next_observation="Questions:\nIs it an animal? Yes.\nDoes it bark? Yes.\n",
             reward=-1.0, terminal=False, turn=1, episode_return=-2.0, success=True, secret="Dog"),
        dict(observation="Questions:\nIs it an animal? Yes.\nDoes it bark? Yes.\n", action="Is it a dog?",
             next_observation="Questions:\nIs it an animal? Yes.\nDoes it bark? Yes.\nIs it a dog? Yes.\n",
             reward=0.0, terminal=True, turn=2, episode_return=-2.0, success=True, secret="Dog"),
    ]
    got = dialogues.lmrl_20q_transitions(game)
    assert got == expected
    assert all(list(t) == list(dialogues.TRANSITION_KEYS) for t in got)
    assert all(type(t["reward"]) is float and type(t["episode_return"]) is float for t in got)


def test_uncorrect_20_line_game_is_truncated_not_terminal():
    lines = [f"Is it thing number {i}? No." for i in range(20)]
    got = dialogues.lmrl_20q_transitions({"lines": lines, "correct": False, "word": ["Rock"]})
    assert len(got) == 20
    assert [t["reward"] for t in got] == [-1.0] * 20
    assert not any(t["terminal"] for t in got)
    assert {t["episode_return"] for t in got} == {-20.0} and not any(t["success"] for t in got)
    assert got[19]["turn"] == 19 and got[19]["action"] == "Is it thing number 19?"
    assert got[19]["next_observation"] == "Questions:\n" + "".join(f"Is it thing number {i}? No.\n" for i in range(20))
    assert got[5]["observation"] == (
        "Questions:\nIs it thing number 0? No.\nIs it thing number 1? No.\nIs it thing number 2? No.\n"
        "Is it thing number 3? No.\nIs it thing number 4? No.\n"
    )


def test_word_as_a_string_and_empty_game():
    assert dialogues.lmrl_20q_transitions({"lines": ["Is it a pen? Yes."], "correct": True, "word": "Pen"}) == [
        transition("Questions:\n", "Is it a pen?", "Yes.", 0.0, True, 0, 0.0, True, "Pen")
    ]
    assert dialogues.lmrl_20q_transitions({"lines": [], "correct": False, "word": ["Pen"]}) == []


def test_bad_line_is_one_line_error_naming_file_game_and_line(tmp_path):
    path = tmp_path / "train.json"
    games = [{"lines": ["Is it a dog? Yes."], "correct": True, "word": ["Dog"]},
             {"lines": ["Is it big? No.", "Is it red? Yes.", "Is it a cat? Maybe."], "correct": False, "word": ["Cat"]}]
    path.write_text(json.dumps(games))
    with pytest.raises(ValueError, match=r"train\.json: game 1: line 2 'Is it a cat\? Maybe\.' ends with neither") as e:
        dialogues.read_lmrl_20q(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="line 2"):
        dialogues.lmrl_20q_transitions(games[1])


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"lines": []}', "expected a JSON list of games"),
        ('[{"lines": ["Is it? Yes."], "word": ["Dog"]}]', "game 0: missing field 'correct'"),
        ('[{"lines": "Is it? Yes.", "correct": true, "word": ["Dog"]}]', "game 0: field 'lines' has type str"),
        ('[{"lines": [3], "correct": true, "word": ["Dog"]}]', r"game 0: lines\[0\] is a int"),
        ('[{"lines": [], "correct": true, "word": []}]', "game 0: field 'word' is empty"),
        ('[[1, 2]]', "game 0: expected an object, got list"),
    ],
)
def test_malformed_20q_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        dialogues.read_lmrl_20q(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json: no such file"):
        dialogues.read_lmrl_20q(tmp_path / "nope.json")


# ---- Guess My City ------------------------------------------------------------------------------------


def test_city_questions_with_newlines_are_one_line():
    game = {
        "conversation": [
            "Based on that, my next question would be:\n\nIs it   in Asia? Yes, my city is in Asia.",
            "Is it a coastal\ncity?\tNo, it is\ninland.",
        ],
        "done": False,
        "word": "seoul,south korea",
    }
    first = "Based on that, my next question would be: Is it in Asia?"
    expected = [
        dict(observation="Questions:\n", action=first,
             next_observation=f"Questions:\n{first} Yes, my city is in Asia.\n",
             reward=-1.0, terminal=False, turn=0, episode_return=-2.0, success=False, secret="seoul,south korea"),
        dict(observation=f"Questions:\n{first} Yes, my city is in Asia.\n", action="Is it a coastal city?",
             next_observation=f"Questions:\n{first} Yes, my city is in Asia.\nIs it a coastal city? No, it is inland.\n",
             reward=-1.0, terminal=False, turn=1, episode_return=-2.0, success=False, secret="seoul,south korea"),
    ]
    assert dialogues.city_transitions(game) == expected


def test_one_line_is_what_the_env_records():
    env = gmc.GuessMyCity()
    for question in ("Based on that:\n\nIs it in Asia?", "Is\tit\r\nin\u2028Europe ?", "Is it " + "very " * 200 + "big?"):
        env.reset(city="Seoul, South Korea")
        observation = env.step(question).observation
        answer = observation.split("\n")[1].removeprefix(dialogues.one_line(question) + " ")
        assert answer in ("Yes.", "No.", "Invalid Question.")
    assert len(dialogues.one_line("x" * 900)) == 500


def test_city_win_before_the_end_drops_later_lines():
    game = {"conversation": ["Is it in Asia? Yes.", "Is your city Tokyo? Yes, you got it!", "Is it Osaka? No."],
            "done": True, "word": "tokyo,japan"}
    assert dialogues.city_transitions(game) == [
        transition("Questions:\n", "Is it in Asia?", "Yes.", -1.0, False, 0, -1.0, True, "tokyo,japan"),
        transition("Questions:\nIs it in Asia? Yes.\n", "Is your city Tokyo?", "Yes, you got it!", 0.0, True, 1, -1.0, True,
                   "tokyo,japan"),
    ]


def test_city_win_uses_the_env_rule_aliases_and_accents():
    alias = {"conversation": ["Is it Mumbai? Yes."], "done": True, "word": "bombay,india"}
    assert dialogues.city_transitions(alias)[0]["terminal"]
    accent = {"conversation": ["Is it Bogotá? Yes."], "done": True, "word": "bogota,colombia"}
    assert dialogues.city_transitions(accent)[0]["terminal"]
    # Naming the country is no win.
    country = {"conversation": ["Is it in Colombia? Yes."], "done": False, "word": "bogota,colombia"}
    assert not dialogues.city_transitions(country)[0]["success"]


def test_city_fallback_for_unknown_cities_is_accent_and_case_insensitive():
    for word in ("kraków,poland", "krakow,poland"):
        with pytest.raises(KeyError):
            gmc.city_named(word)
        game = {"conversation": ["Is it in Poland? Yes.", "Is it Krakowski? No.", "Is your city KRAKÓW? Yes!",
                                 "Is it Warsaw? No."], "done": True, "word": word}
        got = dialogues.city_transitions(game)
        assert [(t["turn"], t["reward"], t["terminal"]) for t in got] == [(0, -1.0, False), (1, -1.0, False), (2, 0.0, True)]
        assert got[2]["next_observation"] == (
            "Questions:\nIs it in Poland? Yes.\nIs it Krakowski? No.\nIs your city KRAKÓW? Yes!\n"
        )
    new_york = {"conversation": ["Is it New York City? Yes."], "done": True, "word": "new york,usa"}
    assert dialogues.city_transitions(new_york)[0]["success"]


def test_city_entry_without_question_mark(tmp_path):
    path = tmp_path / "city.json"
    path.write_text(json.dumps([{"conversation": ["I think it is Paris."], "done": False, "word": "paris,france"}]))
    with pytest.raises(ValueError, match=r"city\.json: game 0: conversation\[0\] 'I think it is Paris\.' has no '\?'"):
        dialogues.read_city_dialogues(path)
    path.write_text(json.dumps([{"conversation": [], "done": "yes", "word": "paris,france"}]))
    with pytest.raises(ValueError, match="game 0: field 'done' has type str"):
        dialogues.read_city_dialogues(path)


# ---- writers ------------------------------------------------------------------------------------------


def test_writers_round_trip_through_readers(tmp_path):
    twenty = [{"lines": ["Is it an animal? Yes.", "Is it a dog? Yes."], "correct": True, "word": ["Dog", "Puppy"]},
              {"lines": ["Is it a \u00e9clair? No."], "correct": False, "word": ["Banana"], "expert": "random"}]
    path = dialogues.write_lmrl_20q(tmp_path / "sub" / "train.json", twenty)
    assert dialogues.read_lmrl_20q(path) == twenty
    city = [{"conversation": ["Based on:\n\nIs it in Asia? Yes, it is.", "Is it São Paulo? No."], "done": False,
             "word": "abidjan,cote d’ivorie"}]
    path = dialogues.write_city_dialogues(tmp_path / "city.json", city)
    assert dialogues.read_city_dialogues(path) == city
    with pytest.raises(ValueError, match=r"bad\.json: game 0: line 0"):
        dialogues.write_lmrl_20q(tmp_path / "bad.json", [{"lines": ["Is it?"], "correct": False, "word": ["Dog"]}])
    assert not (tmp_path / "bad.json").exists()


def test_every_20q_object_name_is_a_valid_secret():
    game = {"lines": [f"Is it a {tq.objects()[0].name.lower()}? Yes."], "correct": True, "word": list(tq.objects()[0].names)}
    assert dialogues.lmrl_20q_transitions(game)[0]["secret"] == tq.objects()[0].name
