"""WebShop with ArCHer: the client of a running WebShop server (princeton-nlp/WebShop).

    python -m web_agent_site.app --log --attrs        # in the WebShop checkout
    python -m archer_jax.train --config=configs/webshop.py --workdir=runs/webshop \
        --config.env.options.base_url=http://127.0.0.1:3000

Reward in [0, 1] on "Buy Now", 10 steps. Official online hyperparameters (docs/algorithms.md) with
rollouts of 512 and learner.actor_lr 1e-5.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import base_config


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config; no presets."""
    if preset:
        raise ValueError(f"unknown preset {preset!r} for configs/webshop.py; it has none")
    c = base_config()
    c.env.name = "webshop"
    c.env.options = ml_collections.ConfigDict(dict(base_url="http://127.0.0.1:3000", timeout_s=10.0))
    c.env.workers = 8
    c.env.max_turns = 10
    c.rollout_size = 512
    c.learner.actor_lr = 1e-5
    return c
