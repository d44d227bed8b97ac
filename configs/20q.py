"""Twenty Questions with ArCHer: the paper's setting, and the embedded ``tiny`` preset.

    python -m archer_jax.train --config=configs/20q.py --workdir=runs/20q
    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    python -m archer_jax.train --config=configs/20q.py --config.critic_lr=2e-5 --config.agent=chai

The default is the official online setting (DESIGN §1): ``gpt2`` policy, ``roberta-base`` critic,
rollouts of 128 dialogues, 50 critic epochs of 32 × 8 transitions per iteration, 3 actor epochs
after 20 warm-up iterations. ``tiny`` needs no download: tiny models with the offline tokenizer,
the embedded oracle, and an SFT warm start from the scripted experts; it learns on a laptop CPU.

(The training entry point that reads this file is issue 6's work in progress.)
"""

from __future__ import annotations

import ml_collections


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the paper's setting) or "tiny"."""
    c = ml_collections.ConfigDict()

    # What to train.
    c.agent = "archer"  # archer | chai | filtered_bc
    c.env = "twenty_questions"  # twenty_questions | twenty_questions_subset | guess_my_city | detective | webshop
    c.policy = "gpt2"  # hub name or HF-format directory
    c.critic = "roberta-base"
    c.critic_embedding = "pooler"  # pooler | first_token
    c.dtype = "float32"  # compute dtype: float32 | bfloat16
    c.seed = 0

    # ArCHer (official online hyperparameters).
    c.iterations = 2000
    c.rollout_size = 128
    c.eval_size = 32
    c.capacity = 100_000
    c.batch_size = 8
    c.grad_accum_steps = 32
    c.epochs = 50
    c.actor_epochs = 3
    c.warmup_iter = 20
    c.critic_lr = 2e-5
    c.lm_lr = 1e-6
    c.gamma = 0.95
    c.tau = 0.1
    c.max_grad_norm = 1.0
    c.actor_loss = "actor_pg"  # actor_pg | actor_token_baseline
    c.chai_samples = 5
    c.filtered_bc_fraction = 0.1

    # Sampling.
    c.max_new_tokens = 32
    c.temperature = 1.0
    c.top_k = 0
    c.top_p = 1.0
    c.max_prompt_length = 512
    c.max_critic_length = 512

    # Environments.
    c.env_workers = 0  # 0 = in-process
    c.max_turns = 20

    # SFT warm start (0 steps = none).
    c.sft_steps = 0
    c.sft_lr = 1e-4
    c.sft_data = "experts"  # experts | a path to dialogues

    # Bookkeeping.
    c.eval_freq = 25
    c.save_freq = 25
    c.log_freq = 1
    c.use_wandb = False

    # Device mesh (-1 = all remaining devices).
    c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))

    if preset == "tiny":
        c.policy = "tiny:gpt2"  # built offline by archer_jax.models.build_tiny
        c.critic = "tiny:roberta"
        c.iterations = 30
        c.rollout_size = 32
        c.eval_size = 32
        c.capacity = 5000
        c.batch_size = 16
        c.grad_accum_steps = 1
        c.epochs = 10
        c.actor_epochs = 3
        c.warmup_iter = 5
        c.critic_lr = 1e-4
        c.lm_lr = 1e-5
        c.max_prompt_length = 256
        c.max_critic_length = 256
        c.sft_steps = 300
        c.eval_freq = 5
        c.save_freq = 10
    elif preset:
        raise ValueError(f"unknown preset {preset!r} for configs/20q.py; known: '' (paper), 'tiny'")
    return c
