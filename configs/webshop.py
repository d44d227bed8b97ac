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

from archer_jax.config import base_config

PRESETS = ("", "tiny", "micro")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the official setting), "tiny" or "micro"."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for configs/webshop.py; known: '' (official), 'tiny', 'micro'")
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
    if preset in ("tiny", "micro"):
        c.model.policy = "tiny:gpt2"  # built offline by archer_jax.models.build_tiny
        c.model.critic = "tiny:roberta"
        c.iterations = 20
        c.rollout_size = 16
        c.eval_size = 16
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
        c.model.max_prompt_length = 256  # pages keep their end
        c.model.max_critic_length = 256
        c.eval_freq = 5
        c.save_freq = 10
    if preset == "micro":
        c.iterations = 2
        c.rollout_size = 2
        c.eval_size = 2
        c.batch_size = 8
        c.critic_steps = 2
        c.actor_steps = 1
        c.bc_steps = 2
        c.warmup_iter = 1
        c.env.workers = 0
        c.env.max_turns = 3
        c.eval_freq = 1
        c.save_freq = 1
    return c
