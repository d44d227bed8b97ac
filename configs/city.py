"""Guess My City with ArCHer: 91 cities, the embedded knowledge-base oracle.

    python -m archer_jax.train --config=configs/city.py --workdir=runs/city

Official online hyperparameters (docs/algorithms.md): as Twenty Questions, but learner.actor_lr 1e-5 and 10 warm-up
iterations. An SFT warm start from the scripted city experts: ``--config.sft.steps=2000``.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import base_config


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config; no presets."""
    if preset:
        raise ValueError(f"unknown preset {preset!r} for configs/city.py; it has none")
    c = base_config()
    c.env.name = "guess_my_city"
    c.learner.actor_lr = 1e-5
    c.warmup_iter = 10
    return c
