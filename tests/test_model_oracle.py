"""Model oracles: the official prompt formats and answer mappings, one batched decode per env
step, answers equal to Hugging Face's PyTorch T5 under the official mapping, config errors, and a
micro training run answered by a tiny random T5."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from archer_jax import model_oracle
from archer_jax.envs import oracle_formats, registry
from archer_jax.envs.base import clean_text
from archer_jax.envs.guess_my_city import GuessMyCity
from archer_jax.envs.oracle import INVALID, NO, YES
from archer_jax.envs.pool import EnvPool
from archer_jax.envs.twenty_questions import TwentyQuestions, TwentyQuestionsSubset
from archer_jax.errors import ConfigError
from archer_jax.models.tiny import build_tiny

QUESTIONS = ["Is it an animal?", "Is it made of metal?", "Is it a dog?", "Can you eat it?", "Is it bigger than a car?",
             "Does it have wheels?", "Is it in Asia?"]


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return build_tiny("t5", tmp_path_factory.mktemp("oracle") / "tiny_t5")


def test_official_yes_no_mapping():
    """Substring tests on the lowercased answer, 'yes' before 'no' (so 'I know' is a no)."""
    assert oracle_formats.yes_no(" Yes, it is") == YES
    assert oracle_formats.yes_no("yes and no") == YES
    assert oracle_formats.yes_no("No.") == NO
    assert oracle_formats.yes_no("I know") == NO
    assert oracle_formats.yes_no("maybe") == INVALID
    assert oracle_formats.yes_no("") == INVALID


def test_official_city_reply():
    assert oracle_formats.city_reply("Seoul, South Korea", "It is in Asia.") == "It is in Asia."
    assert oracle_formats.city_reply("Seoul, South Korea", "My town is seoul!") == oracle_formats.CANT_ANSWER
    assert oracle_formats.city_reply("Seoul, South Korea", "It is in South Korea") == "It is in South Korea"


def test_official_prompts():
    fmt = oracle_formats.FORMATS
    assert fmt[("t5", "twenty_questions")].prompt("Football", "Is it round?") == "The object is football.Is it round?"
    assert fmt[("t5", "guess_my_city")].prompt("Seoul, South Korea", "Is it big?") == "Your home town is Seoul, South Korea.Is it big?"
    assert fmt[("lm", "twenty_questions_subset")].prompt("Dog", "Is it alive?") == "[INST]The object is dog.Is it alive?Yes or No[/INST]\n"
    assert (fmt[("t5", "twenty_questions")].max_new_tokens, fmt[("t5", "guess_my_city")].max_new_tokens) == (16, 64)


@pytest.mark.parametrize("spec, game, message", [
    ("t5", "twenty_questions", "is not 'embedded'"),
    ("gpt:/x", "twenty_questions", "is not 'embedded'"),
    ("t5:", "guess_my_city", "is not 'embedded'"),
    ("lm:/x", "guess_my_city", "no official format for guess_my_city"),
])
def test_bad_specs_are_one_line_errors(spec, game, message):
    with pytest.raises(ValueError, match=message):
        oracle_formats.parse(spec, game)


def hf_answers(directory, prompts, max_new_tokens):
    """Hugging Face's T5 and tokenizer, as the official env calls them (right padding, greedy)."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.T5ForConditionalGeneration.from_pretrained(directory).eval()
    encoded = tokenizer(prompts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],
                             max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.batch_decode(out, skip_special_tokens=True)


@pytest.mark.parametrize("cls", [TwentyQuestions, GuessMyCity])
def test_pool_answers_a_step_in_one_decode_as_hugging_face_does(cls, t5_dir):
    spec = f"t5:{t5_dir}"
    pool = EnvPool(functools.partial(cls, oracle=model_oracle.factory(spec, cls.game)), len(QUESTIONS))
    pool.reset(seeds=range(len(QUESTIONS)))
    oracle = model_oracle.shared(spec, cls.game)
    calls = oracle.calls
    results = pool.step(QUESTIONS)
    assert oracle.calls == calls + 1  # one batched decode for the whole step
    secrets = [r.info.extra[cls.secret_key] for r in results]
    fmt = oracle_formats.FORMATS[("t5", cls.game)]
    decoded = hf_answers(t5_dir, [fmt.prompt(s, q) for s, q in zip(secrets, QUESTIONS)], fmt.max_new_tokens)
    # Each answer on one clean line (control characters dropped), as the dialogue records it.
    expected = [" ".join(clean_text(fmt.answer(s, d)).split()) for s, d in zip(secrets, decoded)]
    got = [r.observation.splitlines()[1][len(q) + 1:] for r, q in zip(results, QUESTIONS)]
    assert got == expected
    # A question's answer does not depend on the batch around it.
    assert oracle.answer(secrets[2], QUESTIONS[2]) == expected[2]


def test_subset_game_uses_the_twenty_questions_format(t5_dir):
    env = TwentyQuestionsSubset(oracle=model_oracle.factory(f"t5:{t5_dir}", "twenty_questions_subset"))
    assert env.oracle.format is oracle_formats.FORMATS[("t5", "twenty_questions_subset")]
    env.reset(0)
    assert env.step("Is it a dog?").observation.splitlines()[1].split("? ")[1] in (YES, NO, INVALID)


def test_lm_oracle_answers_with_a_causal_lm(tmp_path):
    """A tiny random GPT-2 answers through the project's sampler (greedy, 16 new tokens), mapped
    to Yes/No/invalid; the prompt gets the tokenizer's BOS once."""
    directory = build_tiny("gpt2", tmp_path / "gpt2")
    oracle = model_oracle.load(f"lm:{directory}", "twenty_questions_subset")
    answers = oracle.answer_batch([("Dog", "Is it alive?"), ("Pen", "Is it long?"), ("Dog", "Is it alive?")])
    assert set(answers) <= {YES, NO, INVALID} and answers[0] == answers[2]
    assert oracle.generate.prefix in ("", oracle.generate.sampler.tokenizer.bos_token)


def config_with(oracle: str, **env):
    from tests.run.test_train_app import micro

    c = micro()
    c.env.options.oracle = oracle
    for key, value in env.items():
        setattr(c.env, key, value)
    return c


def test_config_errors_name_the_key(tmp_path, t5_dir):
    with pytest.raises(ConfigError, match=r"config.env.options.oracle: 'bert:x' is not"):
        registry.check_options("twenty_questions_subset", config_with("bert:x"))
    with pytest.raises(ConfigError, match=r"config.env.options.oracle: .*missing does not exist"):
        registry.check_options("twenty_questions_subset", config_with(f"t5:{tmp_path}/missing"))
    with pytest.raises(ConfigError, match=r"config.env.workers: a model oracle"):
        registry.check_options("twenty_questions_subset", config_with(f"t5:{t5_dir}", workers=2))
    registry.check_options("twenty_questions_subset", config_with(f"t5:{t5_dir}"))


@pytest.mark.slow
def test_micro_run_with_a_t5_oracle(tmp_path, t5_dir):
    """The train app end to end with ``env.options.oracle=t5:DIR`` (the answers are noise; the
    plumbing is what is checked): rollouts and evaluations are answered by the T5 model."""
    from archer_jax.train import train_and_evaluate

    c = config_with(f"t5:{t5_dir}")
    c.iterations, c.sft.steps = 1, 0
    oracle = model_oracle.shared(f"t5:{t5_dir}", c.env.name)
    before = oracle.questions
    summary = train_and_evaluate(c, tmp_path / "run")
    assert summary["iterations"] == 1 and summary["env_samples"] > 0
    assert oracle.questions - before >= summary["env_samples"]
    assert np.isfinite(summary["eval_return_after"])


def test_a_subclass_that_overrides_step_is_stepped_one_by_one():
    """The pool's batched path must not bypass a game's own ``step`` (wrappers, reward changes)."""
    class Doubled(TwentyQuestionsSubset):
        def step(self, action):
            result = super().step(action)
            return result._replace(reward=2 * result.reward)

    pool = EnvPool(Doubled, 3)
    pool.reset(seeds=range(3))
    assert [r.reward for r in pool.step(["Is it an animal?"] * 3)] == [-2.0, -2.0, -2.0]
    plain = EnvPool(TwentyQuestionsSubset, 3)
    plain.reset(seeds=range(3))
    assert [r.reward for r in plain.step(["Is it an animal?"] * 3)] == [-1.0, -1.0, -1.0]
