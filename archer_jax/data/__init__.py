"""Offline dialogue datasets (Twenty Questions, Guess My City): file formats, TFDS builders, random access.

:mod:`~archer_jax.data.dialogues` reads and writes the JSON formats and turns games into
transitions; :mod:`~archer_jax.data.twenty_questions` and :mod:`~archer_jax.data.guess_my_city`
are the TFDS builders (array_record); :mod:`~archer_jax.data.sources` is what the learners use;
``python -m archer_jax.data.generate`` writes games played by the scripted experts.
"""

from archer_jax.data.dialogues import (
    TRANSITION_KEYS,
    city_transitions,
    lmrl_20q_transitions,
    one_line,
    read_city_dialogues,
    read_lmrl_20q,
    write_city_dialogues,
    write_lmrl_20q,
)
from archer_jax.data.guess_my_city import GuessMyCity
from archer_jax.data.sources import BUILDERS, data_source, episode_columns, prepare, read_transitions
from archer_jax.data.twenty_questions import TwentyQuestions

__all__ = [
    "BUILDERS",
    "GuessMyCity",
    "TRANSITION_KEYS",
    "TwentyQuestions",
    "city_transitions",
    "data_source",
    "episode_columns",
    "lmrl_20q_transitions",
    "one_line",
    "prepare",
    "read_city_dialogues",
    "read_lmrl_20q",
    "read_transitions",
    "write_city_dialogues",
    "write_lmrl_20q",
]
