"""The ``guess_my_city`` TFDS dataset: Guess My City dialogues, one example per transition.

Build it from ``.json`` files in the official Guess My City dialogue format (a list of
``{"conversation", "done", "word"}`` games, see :mod:`archer_jax.data.dialogues`) put in the manual
directory, or files written by :mod:`archer_jax.data.generate`.

Splits: every ``*.json`` of the manual directory, in sorted name order; files whose stem contains
``eval``, ``test`` or ``valid`` form ``eval``, the others ``train``.

Schema (one transition; :mod:`archer_jax.data.dialogue_builder`): ``observation``, ``action``,
``next_observation``, ``secret`` (the file's ``word``, e.g. ``"bogota,colombia"``) as text;
``reward``, ``episode_return`` float32; ``terminal``, ``success`` bool; ``turn`` int32; ``episode``
int64 (the game's index in its split). A turn wins by the env's rule (the city named in the
question); the episode ends at its first win, the only terminal transition, with reward 0.
"""

from __future__ import annotations

from archer_jax.data import dialogues
from archer_jax.data.dialogue_builder import DialogueBuilder


class GuessMyCity(DialogueBuilder):
    """Guess My City dialogues as transitions (the module docstring has the schema)."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Put Guess My City .json files in the official dialogue format ([{conversation, done, word}, ...]) "
        "in manual_dir (stems containing eval, test or valid form the eval split)."
    )
    DESCRIPTION = "Guess My City dialogues (official ArCHer/LMRL-Gym format), one example per transition."
    HOMEPAGE = "https://github.com/YifeiZhou02/ArCHer"
    read_games = staticmethod(dialogues.read_city_dialogues)
    transitions = staticmethod(dialogues.city_transitions)
