"""Twenty Questions offline (OfflineArcher): Offline ArCHer (IQL critic + AWR actor), its SARSA
variant, offline filtered BC and offline BC, trained from a fixed dataset of dialogues and
evaluated online against the embedded oracle.

    python -m archer_jax.train --config=configs/20q_offline.py:tiny --workdir=runs/20q_offline_tiny
    python -m archer_jax.train --config=configs/20q_offline.py --workdir=runs/20q_offline \\
        --config.offline.dataset=/data/lmrl/twenty_questions        # LMRL-Gym's train.json (+ eval.json)
    ... --config.learner.expectile=0.5                              # the SARSA variant
    ... --config.agent=offline_filtered_bc   |   --config.agent=offline_bc

The default is OfflineArcher's setting (submit_OfflineArcher_TwentyQuestions.sh): GPT-2 policy,
RoBERTa-base critic, batches of 32 x 4, actor_lr 1e-4, critic_lr 1e-5, γ 0.99, Polyak 0.05,
expectile 0.9, β (inv_temp) 1.0, no critic warm-up, evaluated on 64 dialogues every 250 steps.
``offline.dataset`` points at LMRL-Gym's offline 20Q data (100K simulated episodes; see the README);
without it the run generates that many dialogues of the embedded env's scripted experts.

``tiny`` plays the 10-object subset with the tiny embedded models, from 1000 generated dialogues of
a mixture of expert qualities (20% optimal, 30% redundant, 50% random); it needs no download and
runs on a laptop CPU in minutes. ``micro`` is tiny cut to seconds, for tests. Hand a finished run's
networks to an online ArCHer run with ``--config.init_from=WORKDIR`` (archer_jax/run/warm_start.py).
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import PRESETS, offline_config, with_preset

__all__ = ["PRESETS", "get_config"]


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (OfflineArcher's setting), "tiny" or "micro"."""
    return with_preset(offline_config(), preset, "configs/20q_offline.py", tiny=TINY, micro=MICRO)


TINY = {
    "env.name": "twenty_questions_subset", "env.max_turns": 12, "iterations": 30, "eval_size": 32,
    "critic_steps": 10, "actor_steps": 10, "bc_steps": 10, "warmup_iter": 0, "eval_freq": 5,
    "learner.actor_lr": 1e-3, "offline.generate_episodes": 1000,
    "rollout_size": 32,  # unused offline; small, so that --config.agent=archer on this preset stays a tiny run
}
MICRO = {"eval_size": 4, "rollout_size": 4, "env.max_turns": 4, "offline.generate_episodes": 16, "warmup_iter": 0}
