"""How an environment's observations become the policy's prompts, and its utterances the env's actions.

    prompter = Prompter(PROMPT_FORMATS["mistral_20q"], tokenizer)
    prompter.prompt("Questions:\\n")          # the instruction around the dialogue, in the chat template
    prompter.env_action('{\\n"Question": "Is it a dog?",\\n')   # -> "Is it a dog?"
    prompter.policy_text("Is it a dog?")       # a demonstration in the policy's format (SFT)

``plain`` (the default) is ArCHer's GPT-2 setting: the prompt is the dialogue itself, the policy's
utterance is the action, a turn ends at a newline. ``mistral_20q`` is the official ``archer_llm``
agent's: its instruction (``archer/prompts/mistral.py``, MISTRAL_TWENTY_QUESTIONS_TEMPLATE) with the
dialogue in place of ``{obs}``, a JSON answer ``{"Question": ...}`` from which the question is taken
as the official decoder does (``mistral_twenty_questions_decode_actions``). The instruction goes
through the tokenizer's chat template where it has one; otherwise it is wrapped as the official
code wraps it (``<s>[INST]...[/INST]``). The replay buffer and the critic keep the raw observation
and the policy's raw utterance, as in the official code; only the env gets the decoded action.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

OBS = "{obs}"

_MISTRAL_20Q = """Please play Twenty Questions with me. The possible hidden words are:
football, dog, banana, truck, pants, computer, piano, chair, pen, scissors.
Some examples are following:
Questions:
Is the object alive? Yes.
Is the object a mammal? No.
Is the object a plant? Yes.
Is the object edible? Yes.
Is the object a fruit? Yes.
Is the object a tropical fruit? Yes.
Is the object a banana? Yes.
You guessed the correct word! You win!

Please continue this conversation by completing the next question. 
{obs}
Please answer in the following format:
{
"Question": "Your Question",
}
The possible hidden words are:
football, dog, banana, truck, pants, computer, piano, chair, pen, scissors."""


def _question_of(text: str) -> str:
    """The official decoder: the text after the last ``"Question":``, up to its first ``?``."""
    action = text.split('"Question":')[-1]
    action = action.split("?")[0] + "?"
    return action.strip().replace('"', "")


@dataclasses.dataclass(frozen=True)
class PromptFormat:
    """A prompt format: the user message (``None``: the observation alone, no chat template), the
    strings that end an utterance, and the maps between utterances and env actions."""

    name: str
    instruction: str | None
    stop_strings: tuple[str, ...]
    env_action: Callable[[str], str]  # the policy's utterance -> the env's action
    policy_text: Callable[[str], str]  # an env action (a demonstration) -> the policy's utterance
    fallback: str = "{message}"  # the wrapping when the tokenizer has no chat template


PROMPT_FORMATS: dict[str, PromptFormat] = {
    "plain": PromptFormat("plain", None, ("\n",), lambda text: text, lambda action: action),
    "mistral_20q": PromptFormat(
        "mistral_20q", _MISTRAL_20Q, ("}",), _question_of,
        lambda action: '{\n"Question": "' + action + '",\n', fallback="<s>[INST]{message}[/INST]\n",
    ),
}


def get(name: str) -> PromptFormat:
    try:
        return PROMPT_FORMATS[name]
    except KeyError:
        raise KeyError(f"unknown prompt format {name!r}; known: {', '.join(PROMPT_FORMATS)}") from None


class Prompter:
    """A :class:`PromptFormat` for one policy tokenizer (its chat template, its BOS)."""

    def __init__(self, fmt: PromptFormat, tokenizer: Any):
        self.format = fmt
        self.prefix, self.suffix = "", ""
        if fmt.instruction is not None:
            before, after = fmt.instruction.split(OBS)
            sentinel = "\x00observation\x00"
            if getattr(tokenizer, "chat_template", None):
                wrapped = tokenizer.apply_chat_template(
                    [{"role": "user", "content": before + sentinel + after}], tokenize=False, add_generation_prompt=True)
            else:
                wrapped = fmt.fallback.format(message=before + sentinel + after)
            self.prefix, self.suffix = wrapped.split(sentinel)
        bos = getattr(tokenizer, "bos_token", None)
        # A prompt whose text already begins with the BOS token (chat templates write it) is not
        # given a second one when tokenized.
        self.add_special_tokens = not (bos and self.prefix.startswith(bos))

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return self.format.stop_strings

    def prompt(self, observation: str) -> str:
        """The policy's prompt for an observation."""
        return self.prefix + observation + self.suffix

    def env_action(self, utterance: str) -> str:
        """The env's action for the policy's utterance (the stop string already cut)."""
        return self.format.env_action(utterance)

    def policy_text(self, action: str) -> str:
        """A demonstration's env action as the policy would say it (before the stop string)."""
        return self.format.policy_text(action)
