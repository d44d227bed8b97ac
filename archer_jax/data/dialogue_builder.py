"""What the dialogue datasets share: one example per transition, and splits from the files of manual_dir.

Every ``*.json`` file in the manual directory is read, in sorted name order; files whose stem
contains ``eval``, ``test`` or ``valid`` (any case) form the ``eval`` split, the others ``train``.
Features of one example (one transition, see :mod:`archer_jax.data.dialogues`):

=================  =======  ================================================================
observation        text     the dialogue before the turn, ``"Questions:\\n"`` then one line per turn
action             text     the question asked (one line)
next_observation   text     the dialogue after the turn
reward             float32  -1, or 0 on the winning turn
terminal           bool     the winning turn (a game without a win is truncated: never terminal)
turn               int32    0-based turn index
episode_return     float32  the sum of the episode's rewards
success            bool     the episode was won
secret             text     the hidden object (first name) or city (the file's ``word``)
episode            int64    the game's index in its split, counting across the split's files in order
=================  =======  ================================================================

Keys are ``f"{file_stem}/{game:07d}/{turn:02d}"`` (``game``: the index within its file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import tensorflow_datasets as tfds

EVAL_MARKERS = ("eval", "test", "valid")
TEXT_FEATURES = ("observation", "action", "next_observation", "secret")


def transition_features() -> tfds.features.FeaturesDict:
    """The features of one transition example (the table in the module docstring)."""
    text = {key: tfds.features.Text() for key in TEXT_FEATURES}
    return tfds.features.FeaturesDict({
        **text,
        "reward": tfds.features.Scalar(np.float32),
        "terminal": tfds.features.Scalar(np.bool_),
        "turn": tfds.features.Scalar(np.int32),
        "episode_return": tfds.features.Scalar(np.float32),
        "success": tfds.features.Scalar(np.bool_),
        "episode": tfds.features.Scalar(np.int64),
    })


def split_of(path: Path) -> str:
    """``"eval"`` for a file whose stem contains eval, test or valid; else ``"train"``."""
    stem = path.stem.lower()
    return "eval" if any(marker in stem for marker in EVAL_MARKERS) else "train"


def manual_splits(manual_dir: str | Path) -> dict[str, list[Path]]:
    """The ``*.json`` files of ``manual_dir`` by split, sorted by name; a ValueError without a train file."""
    manual_dir = Path(manual_dir)
    if not manual_dir.is_dir():
        raise FileNotFoundError(f"{manual_dir}: manual_dir does not exist or is not a directory")
    files = sorted(p for p in manual_dir.glob("*.json") if p.is_file())
    if not files:
        raise ValueError(f"{manual_dir} holds no .json dialogue file")
    splits: dict[str, list[Path]] = {}
    for path in files:
        splits.setdefault(split_of(path), []).append(path)
    if "train" not in splits:
        raise ValueError(f"{manual_dir} has no train file (the name of every .json file in it contains one of "
                         f"{', '.join(EVAL_MARKERS)})")
    return splits


class DialogueBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A transition dataset over the dialogue files of manual_dir (subclasses: the format and the docs)."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES: ClassVar[dict[str, str]] = {"1.0.0": "First release: one example per transition."}
    DESCRIPTION: ClassVar[str] = ""
    HOMEPAGE: ClassVar[str] = ""

    @staticmethod
    def read_games(path: Path) -> list[dict]:
        """The games of one file (checked)."""
        raise NotImplementedError

    @staticmethod
    def transitions(game: dict) -> list[dict[str, Any]]:
        """The transitions of one game."""
        raise NotImplementedError

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self, description=self.DESCRIPTION, features=transition_features(), homepage=self.HOMEPAGE
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator]:
        splits = manual_splits(dl_manager.manual_dir)
        return {name: self._generate_examples(paths) for name, paths in splits.items()}

    def _generate_examples(self, paths: list[Path]) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from transition_examples(paths, self.read_games, self.transitions)


def transition_examples(
    paths: list[Path], read: Callable[[Path], list[dict]], transitions: Callable[[dict], list[dict[str, Any]]]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key, example)`` for every transition of every game of ``paths``, games numbered across the files."""
    episode = 0
    for path in paths:
        path = Path(path)
        for game_index, game in enumerate(read(path)):
            for transition in transitions(game):
                yield f"{path.stem}/{game_index:07d}/{transition['turn']:02d}", {**transition, "episode": episode}
            episode += 1
