"""Twenty Questions with token-level PPO, the paper's on-policy baseline, and its advantage estimators.

    python -m archer_jax.train --config=configs/20q_ppo.py:tiny --workdir=runs/20q_ppo_tiny
    python -m archer_jax.train --config=configs/20q_ppo.py:tiny --workdir=runs/20q_ragen_tiny \\
        --config.ppo.adv_estimator=archer_ragen
    python -m archer_jax.train --config=configs/20q_ppo.py:tiny --workdir=runs/20q_grpo_tiny \\
        --config.ppo.adv_estimator=grpo --config.rollout_group_size=4

The default is the paper's Twenty Questions setting (``configs/20q.py``: GPT-2 policy, rollouts of
128 dialogues) with ``agent="ppo"``: each iteration's rollout is learned from in ``ppo.epochs``
passes of minibatches of ``batch_size x grad_accum_steps`` transitions, then dropped (PPO is
on-policy). ``ppo.adv_estimator`` picks the estimator: ``gae`` (token-level GAE over the
dialogue's utterances, with a value head on the policy), ``grpo`` (returns standardised over
``rollout_group_size`` rollouts of one game, no value head), ``archer_ragen`` (RAGEN's archer
estimator) or ``archer_hierarchical`` (ArCHer's TD-learned utterance critic, the RoBERTa critic of
``configs/20q.py``, as the turn level; ``warmup_iter`` iterations train it before PPO starts).

``tiny``, ``micro`` and ``weak`` are ``configs/20q.py``'s, with the same SFT warm start, so PPO starts where
ArCHer does, and PPO's own defaults: 4 epochs of 32-transition minibatches, about 36 policy steps
on a tiny rollout's ~260 transitions, where ArCHer's actor takes ``actor_steps`` (3). With
``archer_hierarchical``, ``--config.ppo.lam=1.0 --config.ppo.whiten=False`` is its unbiased form
(``benchmarks/sample_efficiency.py`` runs that form); ``--config.ppo.critic_baseline=True`` makes the
turn level the critic's ``Q(s, a) - V(s)``, so the token value head need not follow the critic's level.
"""

from __future__ import annotations

from pathlib import Path

import ml_collections

from archer_jax.config import config_module, file_config

__all__ = ["PRESETS", "get_config"]

PRESETS = config_module(Path(__file__).with_name("20q.py")).PRESETS  # configs/20q.py's, "weak" among them


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset`` of configs/20q.py ("" is the paper's setting) with PPO."""
    c = file_config(Path(__file__).with_name("20q.py"), preset)
    c.agent = "ppo"
    c.model.critic_action = "utterance"  # PPO's turn-level critic as measured (not the tiny ArCHer's)
    return c
