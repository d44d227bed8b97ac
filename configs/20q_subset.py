"""Twenty Questions over the paper's 10-object subset (football, dog, banana, truck, pants,
computer, piano, chair, pen, scissors), the setting of its Mistral-7B actor experiment.

    python -m archer_jax.train --config=configs/20q_subset.py --workdir=runs/20q_subset

Official online hyperparameters otherwise (docs/algorithms.md), with the GPT-2 policy and RoBERTa critic.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import base_config


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config; no presets."""
    if preset:
        raise ValueError(f"unknown preset {preset!r} for configs/20q_subset.py; it has none")
    c = base_config()
    c.env.name = "twenty_questions_subset"
    return c
