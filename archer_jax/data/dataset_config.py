"""The offline agents' dataset keys (``config.offline``): where the dialogues come from and how
they are built, with their checks.

``dataset`` names dialogue files in the env's format (a directory or one ``.json``: LMRL-Gym's for
20Q, the official one for Guess My City), built once with TFDS into ``data_dir`` (default: the
workdir's). An empty ``dataset`` is generated from the embedded env's scripted experts in
``policy_mix`` (kinds of :data:`archer_jax.envs.experts.EXPERTS`, weights normalised).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from archer_jax.data.generate import parse_policy_mix
from archer_jax.runtime.config_keys import key

SPLITS = ("train", "eval")


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """``config.offline``; ``__post_init__`` raises ValueError naming the key."""

    dataset: str = key(
        "", 'offline agents: a directory of dialogue .json files or one file ("" = generate from the experts)',
        official="OfflineArcher `datasets/20q_train.json`")
    data_dir: str = key("", 'offline agents: where TFDS builds the dataset ("" = workdir/offline/tfds)')
    split: str = key("train", "offline agents: the dataset split trained on (train | eval)")
    generate_episodes: int = key(2000, "offline agents without a dataset: expert dialogues generated")
    policy_mix: str = key(
        "optimal:0.2,redundant:0.3,random:0.5", "offline agents without a dataset: expert kinds and weights, e.g. "
        "optimal:0.2,redundant:0.3,random:0.5")
    generate_seed: int = key(
        0, "offline agents without a dataset: the generator's seed (the same data for every run seed)")

    def __post_init__(self):
        if self.dataset and not Path(self.dataset).expanduser().exists():
            raise ValueError(f"dataset: {self.dataset} does not exist (a directory of .json dialogue files, or one "
                             "file; \"\" generates one)")
        if self.split not in SPLITS:
            raise ValueError(f"split: unknown value {self.split!r}; known: {', '.join(SPLITS)}")
        if self.generate_episodes < 1:
            raise ValueError(f"generate_episodes: must be > 0, got {self.generate_episodes}")
        if not self.dataset:
            try:
                parse_policy_mix(self.policy_mix)
            except ValueError as e:
                raise ValueError(f"policy_mix: {str(e).removeprefix('--policy_mix: ')}") from None
