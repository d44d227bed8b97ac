"""Twenty Questions with ArCHer: the paper's setting, and the embedded ``tiny`` preset.

    python -m archer_jax.train --config=configs/20q.py --workdir=runs/20q
    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    python -m archer_jax.train --config=configs/20q.py --config.learner.critic_lr=2e-5 --config.agent=chai

The default is the official online setting (docs/algorithms.md): ``gpt2`` policy, ``roberta-base`` critic,
rollouts of 128 dialogues, 50 critic steps of 32 x 8 transitions per iteration, 3 actor steps
after 20 warm-up iterations.

``tiny`` is the embedded default: it needs no download (tiny GPT-2 / RoBERTa built offline with
their own tokenizers, the embedded knowledge-base oracle) and learns on a laptop CPU in minutes.
It plays the paper's 10-object subset of the game (a 2-layer, 64-wide policy cannot hold a
decision tree over all 157 objects), warm-started by SFT on dialogues of two scripted experts (one
optimal, one asking informative questions in random order), so there is room for RL to improve
on the imitation.

``micro`` is ``tiny`` cut to seconds of work, for tests.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import base_config

PRESETS = ("", "tiny", "micro")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the paper's setting), "tiny" or "micro"."""
    c = base_config()
    if preset in ("tiny", "micro"):
        c.env.name = "twenty_questions_subset"
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
        c.learner.actor_lr = 1e-5
        # A 64-wide policy puts much mass on junk tokens: sample from its cooler, nucleus-cut
        # distribution (the paper's GPT-2 samples at temperature 1).
        c.sampling.temperature = 0.7
        c.sampling.top_p = 0.9
        c.env.max_turns = 12
        c.model.max_prompt_length = 256
        c.model.max_critic_length = 256
        c.sft.steps = 300
        c.sft.lr = 1e-3
        c.sft.batch_size = 32
        c.sft.dialogues = 256
        c.sft.experts = "optimal,random_order"  # half the dialogues ask informative questions in random order
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
    elif preset not in ("", "tiny"):
        raise ValueError(f"unknown preset {preset!r} for configs/20q.py; known: '' (paper), 'tiny', 'micro'")
    return c
