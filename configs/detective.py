"""Detective (the Z-machine game through jericho) with ArCHer.

    pip install -e ".[detective]"
    python -m archer_jax.train --config=configs/detective.py --workdir=runs/detective \
        --config.env.options.game_path=/path/to/detective.z5
    python -m archer_jax.train --config=configs/detective.py:tiny --workdir=runs/detective_tiny \
        --config.env.options.game_path=/path/to/detective.z5

``detective.z5`` is not shipped: it is in the jericho game suite
(https://github.com/BYU-PCCL/z-machine-games, ``jericho-game-suite/detective.z5``). Reward is the
score gained per step (max 360), 50 steps per episode, one game per worker process. Official
online hyperparameters (docs/algorithms.md): learner.actor_lr 1e-5, 10 warm-up iterations; the official code ran 4
envs at a time, here ``env.workers`` processes step them in parallel. ``sft.data="walkthrough"``
warm-starts on jericho's walkthrough.

``tiny``: no model download (tiny GPT-2 / RoBERTa built offline), a short warm start on the
walkthrough, 8 games of 20 steps per iteration on 2 workers (the game steps at ~20/s per process);
it still needs jericho and the game file. ``micro`` is ``tiny`` cut to seconds of work.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import PRESETS, base_config, with_preset

__all__ = ["PRESETS", "get_config"]


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the official setting), "tiny" or "micro"."""
    c = base_config()
    c.env.name = "detective"
    c.env.options = ml_collections.ConfigDict(dict(game_path="", list_valid_actions=True))
    c.env.workers = 8
    c.env.max_turns = 50
    c.learner.actor_lr = 1e-5
    c.warmup_iter = 10
    c.rollout_size = 32
    c.sft.data = "walkthrough"
    return with_preset(c, preset, "configs/detective.py", tiny={
        "iterations": 20, "rollout_size": 8,
        "eval_size": 2,  # one game: greedy evaluations replay it
        "env.workers": 2, "env.max_turns": 20, "sft.steps": 100, "sft.lr": 1e-3, "sft.batch_size": 16,
    }, micro={
        "rollout_size": 2, "eval_size": 1, "env.workers": 0, "env.max_turns": 4, "sft.steps": 4, "sft.batch_size": 8,
    })
