"""Prompt formats: the official archer_llm instruction and decoder, chat templates, and plain prompts."""

from __future__ import annotations

import pytest

from archer_jax import models
from archer_jax.input_pipeline import InputPipeline
from archer_jax.models import tiny
from archer_jax.sampling import prompts


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    tiny.train_tokenizer("llama", root / "llama")
    tiny.train_tokenizer("gpt2", root / "gpt2")
    return models.load_tokenizer(root / "llama"), models.load_tokenizer(root / "gpt2")


# What the official agent sends for the first turn: archer/prompts/mistral.py's template with
# "{obs}" replaced by the env's INITIAL_STR (quoted from the official code, trailing space included).
OFFICIAL_FIRST_PROMPT = (
    "<s>[INST]Please play Twenty Questions with me. The possible hidden words are:\n"
    "football, dog, banana, truck, pants, computer, piano, chair, pen, scissors.\n"
    "Some examples are following:\nQuestions:\nIs the object alive? Yes.\nIs the object a mammal? No.\n"
    "Is the object a plant? Yes.\nIs the object edible? Yes.\nIs the object a fruit? Yes.\n"
    "Is the object a tropical fruit? Yes.\nIs the object a banana? Yes.\nYou guessed the correct word! You win!\n\n"
    "Please continue this conversation by completing the next question. \nQuestions:\n\n"
    'Please answer in the following format:\n{\n"Question": "Your Question",\n}\n'
    "The possible hidden words are:\nfootball, dog, banana, truck, pants, computer, piano, chair, pen, scissors.[/INST]\n"
)


def test_without_a_chat_template_the_prompt_is_the_official_one(tokenizers):
    _, gpt2_style = tokenizers
    prompter = prompts.Prompter(prompts.get("mistral_20q"), gpt2_style)
    assert prompter.prompt("Questions:\n") == OFFICIAL_FIRST_PROMPT


def test_the_chat_template_wraps_the_instruction_and_bos_is_not_doubled(tokenizers):
    llama, _ = tokenizers
    prompter = prompts.Prompter(prompts.get("mistral_20q"), llama)
    text = prompter.prompt("Questions:\nIs it alive? No.\n")
    assert text.startswith("[INST] Please play Twenty Questions") and text.endswith("scissors. [/INST]")
    assert "Questions:\nIs it alive? No.\n" in text
    # A tokenizer whose template writes BOS itself gets no second one.
    llama.chat_template = "{{ bos_token }}[INST] {{ messages[0]['content'] }} [/INST]"
    with_bos = prompts.Prompter(prompts.get("mistral_20q"), llama)
    assert with_bos.prompt("x").startswith(llama.bos_token) and not with_bos.add_special_tokens


@pytest.mark.parametrize("utterance, action", [
    ('{\n"Question": "Is it a dog?",\n', "Is it a dog?"),
    ('Sure! {"Question": "Is the object alive? Or not?"}', "Is the object alive?"),
    ("Is it a pen", "Is it a pen?"),  # the official decoder always ends with "?"
])
def test_the_official_decoder(utterance, action):
    assert prompts.get("mistral_20q").env_action(utterance) == action


def test_demonstrations_round_trip_and_plain_is_the_identity(tokenizers):
    fmt = prompts.get("mistral_20q")
    assert fmt.env_action(fmt.policy_text("Is it a truck?")) == "Is it a truck?"
    plain = prompts.Prompter(prompts.get("plain"), tokenizers[1])
    assert plain.prompt("Questions:\n") == "Questions:\n" and plain.env_action("Is it?") == "Is it?"
    assert plain.add_special_tokens and plain.stop_strings == ("\n",)
    with pytest.raises(KeyError, match="unknown prompt format 'chatml'"):
        prompts.get("chatml")


def test_the_pipeline_tokenizes_prompts_and_utterances_with_the_format(tokenizers):
    llama, _ = tokenizers
    prompter = prompts.Prompter(prompts.get("mistral_20q"), llama)
    pipeline = InputPipeline(llama, None, 512, 512, 64, prompter)
    (row,) = pipeline.policy_rows(["Questions:\n"])
    assert llama.decode(row) == prompter.prompt("Questions:\n")
    (action,) = pipeline.demonstration_rows(["Is it a dog?"])
    assert llama.decode(action) == '{\n"Question": "Is it a dog?",\n}'  # the stop string "}" ends it
