"""Twenty Questions over the paper's 10-object subset (football, dog, banana, truck, pants,
computer, piano, chair, pen, scissors), the setting of its Mistral-7B actor experiment.

    python -m archer_jax.train --config=configs/20q_subset.py --workdir=runs/20q_subset
    python -m archer_jax.train --config=configs/20q_subset.py:tiny --workdir=runs/20q_subset_tiny

Official online hyperparameters otherwise (docs/algorithms.md), with the GPT-2 policy and RoBERTa critic.

``tiny`` and ``micro`` are ``configs/20q.py``'s presets, which already play this subset: tiny
models built offline, an SFT warm start on the scripted experts, minutes (``tiny``) or seconds
(``micro``) on a laptop CPU.
"""

from __future__ import annotations

from pathlib import Path

import ml_collections

from archer_jax.config import PRESETS, base_config, file_config



def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the paper's setting on the subset), "tiny" or "micro"."""
    if preset in ("tiny", "micro"):
        c = file_config(Path(__file__).with_name("20q.py"), preset)
    elif preset:
        raise ValueError(f"unknown preset {preset!r} for configs/20q_subset.py; known: '' (paper), 'tiny', 'micro'")
    else:
        c = base_config()
    c.env.name = "twenty_questions_subset"
    return c
