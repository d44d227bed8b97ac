"""Detective (the Z-machine game through jericho) with ArCHer.

    pip install -e ".[detective]"
    python -m archer_jax.train --config=configs/detective.py --workdir=runs/detective \
        --config.env.options.game_path=/path/to/detective.z5

``detective.z5`` is not shipped: it is in the jericho game suite
(https://github.com/BYU-PCCL/z-machine-games, ``jericho-game-suite/detective.z5``). Reward is the
score gained per step (max 360), 50 steps per episode, one game per worker process. Official
online hyperparameters (docs/algorithms.md): learner.actor_lr 1e-5, 10 warm-up iterations; the official code ran 4
envs at a time, here ``env.workers`` processes step them in parallel. ``sft.data="walkthrough"``
warm-starts on jericho's walkthrough.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import base_config


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config; no presets."""
    if preset:
        raise ValueError(f"unknown preset {preset!r} for configs/detective.py; it has none")
    c = base_config()
    c.env.name = "detective"
    c.env.options = ml_collections.ConfigDict(dict(game_path="", list_valid_actions=True))
    c.env.workers = 8
    c.env.max_turns = 50
    c.learner.actor_lr = 1e-5
    c.warmup_iter = 10
    c.rollout_size = 32
    c.sft.data = "walkthrough"
    return c
