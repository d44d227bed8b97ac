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

from archer_jax.config import PRESETS, base_config, with_preset

__all__ = ["PRESETS", "get_config"]


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the official setting), "tiny" or "micro"."""
    c = base_config()
    c.env.name = "guess_my_city"
    c.learner.actor_lr = 1e-5
    c.warmup_iter = 10
    return with_preset(c, preset, "configs/city.py", tiny={
        "iterations": 30, "rollout_size": 32, "eval_size": 32,
        "env.max_turns": 15,  # the optimal city expert needs at most 10 turns
        "sft.steps": 300, "sft.lr": 1e-3, "sft.batch_size": 32, "sft.dialogues": 256,
        "sft.experts": "optimal,random_order",
        "critic_pretrain.steps": 300, "critic_pretrain.lr": 3e-3,  # the critic's encoder, as configs/20q.py:tiny's
    }, micro={
        "rollout_size": 4, "eval_size": 4, "env.max_turns": 4, "sft.steps": 4, "sft.batch_size": 8, "sft.dialogues": 4,
    })
