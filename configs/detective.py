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

from archer_jax.config import base_config

PRESETS = ("", "tiny", "micro")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the official setting), "tiny" or "micro"."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for configs/detective.py; known: '' (official), 'tiny', 'micro'")
    c = base_config()
    c.env.name = "detective"
    c.env.options = ml_collections.ConfigDict(dict(game_path="", list_valid_actions=True))
    c.env.workers = 8
    c.env.max_turns = 50
    c.learner.actor_lr = 1e-5
    c.warmup_iter = 10
    c.rollout_size = 32
    c.sft.data = "walkthrough"
    if preset in ("tiny", "micro"):
        c.model.policy = "tiny:gpt2"  # built offline by archer_jax.models.build_tiny
        c.model.critic = "tiny:roberta"
        c.iterations = 20
        c.rollout_size = 8
        c.eval_size = 2  # one game: greedy evaluations replay it
        c.capacity = 10_000
        c.batch_size = 32
        c.grad_accum_steps = 1
        c.critic_steps = 10
        c.actor_steps = 3
        c.bc_steps = 10
        c.warmup_iter = 5
        c.learner.critic_lr = 1e-4
        c.sampling.temperature = 0.7  # a 64-wide policy samples junk tokens at temperature 1
        c.sampling.top_p = 0.9
        c.env.workers = 2
        c.env.max_turns = 20
        c.model.max_prompt_length = 256  # observations keep their end (the latest text)
        c.model.max_critic_length = 256
        c.sft.steps = 100
        c.sft.lr = 1e-3
        c.sft.batch_size = 16
        c.eval_freq = 5
        c.save_freq = 10
    if preset == "micro":
        c.iterations = 2
        c.rollout_size = 2
        c.eval_size = 1
        c.batch_size = 8
        c.critic_steps = 2
        c.actor_steps = 1
        c.bc_steps = 2
        c.warmup_iter = 1
        c.env.workers = 0
        c.env.max_turns = 4
        c.sft.steps = 4
        c.sft.batch_size = 8
        c.eval_freq = 1
        c.save_freq = 1
    return c
