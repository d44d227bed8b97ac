"""WebShop with ArCHer: the client of a running WebShop server (princeton-nlp/WebShop).

    python -m web_agent_site.app --log --attrs        # in the WebShop checkout
    python -m archer_jax.train --config=configs/webshop.py --workdir=runs/webshop \
        --config.env.options.base_url=http://127.0.0.1:3000
    python -m archer_jax.train --config=configs/webshop.py:tiny --workdir=runs/webshop_tiny

Reward in [0, 1] on "Buy Now", 10 steps. Official online hyperparameters (docs/algorithms.md) with
rollouts of 512 and learner.actor_lr 1e-5.

``tiny``: no model download (tiny GPT-2 / RoBERTa built offline), 16 sessions per iteration, no
warm start (WebShop has no scripted experts here; ``--config.sft.data=demos.jsonl
--config.sft.steps=...`` adds one); it still needs the server. ``micro`` is ``tiny`` cut to
seconds of work.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import PRESETS, base_config, with_preset

__all__ = ["PRESETS", "get_config"]


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the official setting), "tiny" or "micro"."""
    c = base_config()
    c.env.name = "webshop"
    # Goals (archer_jax.envs.webshop_goals): rollouts play WebShop's training split, evaluations
    # its dev split; the official ArCHer code used 2000-2099 for both ("(2000, 2100)" for each).
    c.env.options = ml_collections.ConfigDict(dict(base_url="http://127.0.0.1:3000", timeout_s=10.0,
                                                   train_goals=(1500, 12087), eval_goals=(500, 1500)))
    c.env.workers = 8
    c.env.max_turns = 10
    c.rollout_size = 512
    c.learner.actor_lr = 1e-5
    return with_preset(c, preset, "configs/webshop.py", tiny={
        "iterations": 20, "rollout_size": 16, "eval_size": 16, "env.workers": 2,
    }, micro={
        "rollout_size": 2, "eval_size": 2, "env.workers": 0, "env.max_turns": 3,
    })
