"""Guess My City with ArCHer: 91 cities, the embedded knowledge-base oracle.

    python -m archer_jax.train --config=configs/city.py --workdir=runs/city
    python -m archer_jax.train --config=configs/city.py:tiny --workdir=runs/city_tiny

Official online hyperparameters (docs/algorithms.md): as Twenty Questions, but learner.actor_lr 1e-5 and 10 warm-up
iterations. An SFT warm start from the scripted city experts: ``--config.sft.steps=2000``.

``tiny``: no download (tiny GPT-2 / RoBERTa built offline), an SFT warm start on the scripted city
experts, then the counts of ``configs/20q.py:tiny``; a laptop CPU runs it in minutes. ``micro`` is
``tiny`` cut to seconds of work, for tests.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import base_config

PRESETS = ("", "tiny", "micro")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the official setting), "tiny" or "micro"."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for configs/city.py; known: '' (official), 'tiny', 'micro'")
    c = base_config()
    c.env.name = "guess_my_city"
    c.learner.actor_lr = 1e-5
    c.warmup_iter = 10
    if preset in ("tiny", "micro"):
        c.model.policy = "tiny:gpt2"  # built offline by archer_jax.models.build_tiny
        c.model.critic = "tiny:roberta"
        c.iterations = 30
        c.rollout_size = 32
        c.eval_size = 32
        c.capacity = 10_000
        c.batch_size = 32
        c.grad_accum_steps = 1
        c.critic_steps = 10
        c.bc_steps = 10
        c.actor_steps = 3
        c.warmup_iter = 5
        c.learner.critic_lr = 1e-4
        c.sampling.temperature = 0.7  # a 64-wide policy samples junk tokens at temperature 1
        c.sampling.top_p = 0.9
        c.env.max_turns = 15  # the optimal city expert needs at most 10 turns
        c.model.max_prompt_length = 256
        c.model.max_critic_length = 256
        c.sft.steps = 300
        c.sft.lr = 1e-3
        c.sft.batch_size = 32
        c.sft.dialogues = 256
        c.sft.experts = "optimal,random_order"
        c.eval_freq = 5
        c.save_freq = 10
    if preset == "micro":
        c.iterations = 2
        c.rollout_size = 4
        c.eval_size = 4
        c.batch_size = 8
        c.critic_steps = 2
        c.bc_steps = 2
        c.actor_steps = 1
        c.warmup_iter = 1
        c.env.max_turns = 4
        c.sft.steps = 4
        c.sft.batch_size = 8
        c.sft.dialogues = 4
        c.eval_freq = 1
        c.save_freq = 1
    return c
