"""The ``twenty_questions`` TFDS dataset: LMRL-Gym Twenty Questions dialogues, one example per transition.

Build it from LMRL-Gym-format ``.json`` files (a list of ``{"lines", "correct", "word"}`` games, see
:mod:`archer_jax.data.dialogues`) put in the manual directory, e.g. LMRL-Gym's
``twenty_questions/train.json`` and ``eval.json``, or files written by :mod:`archer_jax.data.generate`.

Splits: every ``*.json`` of the manual directory, in sorted name order; files whose stem contains
``eval``, ``test`` or ``valid`` form ``eval``, the others ``train``.

Schema (one transition; :mod:`archer_jax.data.dialogue_builder`): ``observation``, ``action``,
``next_observation``, ``secret`` (the word's first name) as text; ``reward``, ``episode_return``
float32; ``terminal``, ``success`` bool; ``turn`` int32; ``episode`` int64 (the game's index in
its split). The last line of a correct game is the only terminal transition, with reward 0; a
game without a win is truncated (not terminal).
"""

from __future__ import annotations

from archer_jax.data import dialogues
from archer_jax.data.dialogue_builder import DialogueBuilder


class TwentyQuestions(DialogueBuilder):
    """LMRL-Gym Twenty Questions dialogues as transitions (the module docstring has the schema)."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Put LMRL-Gym-format Twenty Questions .json files in manual_dir, e.g. LMRL-Gym's "
        "twenty_questions/train.json and eval.json (stems containing eval, test or valid form the eval split)."
    )
    DESCRIPTION = "Twenty Questions dialogues (LMRL-Gym format), one example per transition."
    HOMEPAGE = "https://github.com/abdulhaim/LMRL-Gym"
    read_games = staticmethod(dialogues.read_lmrl_20q)
    transitions = staticmethod(dialogues.lmrl_20q_transitions)
