"""Twenty Questions with ArCHer: the paper's setting, and the embedded ``tiny`` preset.

    python -m archer_jax.train --config=configs/20q.py --workdir=runs/20q
    python -m archer_jax.train --config=configs/20q.py:tiny --workdir=runs/20q_tiny
    python -m archer_jax.train --config=configs/20q.py --workdir=runs/20q_chai \\
        --config.learner.critic_lr=2e-5 --config.agent=chai

The default is the official online setting (docs/algorithms.md): ``gpt2`` policy, ``roberta-base`` critic,
rollouts of 128 dialogues, 50 critic steps of 32 x 8 transitions per iteration, 3 actor steps
after 20 warm-up iterations.

``tiny`` is the embedded default: it needs no download (tiny GPT-2 / RoBERTa built offline with
their own tokenizers, the embedded knowledge-base oracle) and runs on a laptop CPU in minutes.
It plays the paper's 10-object subset of the game (a 2-layer, 64-wide policy cannot hold a
decision tree over all 157 objects), warm-started by SFT on dialogues of two scripted experts (one
optimal, one asking informative questions in random order), so there is room for RL to improve
on the imitation. The critic's encoder (built offline, random) is first trained by 300
masked-LM steps on the SFT dialogues' texts (``critic_pretrain``), as the paper's critic starts
from a pretrained RoBERTa, and it reads each utterance after the dialogue it answers
(``model.critic_action="in_context"``), so that it can see a repeated question.

``micro`` is ``tiny`` cut to seconds of work, for tests (no critic pretraining; the official
critic, which encodes the utterance alone).

``weak`` is ``tiny`` with a weak start, a setting where the methods separate: SFT on dialogues of
which one in four is the optimal expert's and three are a random player's (random questions of the
game, now and then a random guess), and 40 iterations for RL to climb from there
(``benchmarks/learning_hard.py`` compares the methods on it). Its ArCHer takes 4x the tiny
preset's learner steps (40 critic and 12 actor steps an iteration: nearer the official
update-to-data ratio) and starts its critic's heads at -9, the value of a game lost at the
12-turn limit.

``small`` is the full game (157 objects, 20 turns, the embedded oracle) on a CPU: a 4-layer,
128-wide GPT-2 and a matching RoBERTa built offline (``small:gpt2``, ``small:roberta``), SFT on
1024 of the optimal expert's dialogues (600 steps). Its ArCHer takes the weak start's recipe
(40 critic and 12 actor steps an iteration, the critic's heads from -13, a lost game's value).
Runs compared with each other should share one SFT start (``--config.sft.cache``).

What each preset was measured to do (returns, the ablations behind these choices) is in the
README's learning section and in benchmarks/README.md.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import PRESETS as COMMON, base_config, with_preset

__all__ = ["PRESETS", "get_config"]

PRESETS = (*COMMON, "weak", "small")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the paper's setting), "tiny", "micro", "weak" or "small"."""
    return with_preset(base_config(), preset, "configs/20q.py", tiny={
        "env.name": "twenty_questions_subset", "iterations": 30, "rollout_size": 32, "eval_size": 32,
        "learner.actor_lr": 1e-5, "env.max_turns": 12,
        "sft.steps": 300, "sft.lr": 1e-3, "sft.batch_size": 32, "sft.dialogues": 256,
        "sft.experts": "optimal,random_order",  # half the dialogues ask informative questions in random order
        # Masked-LM steps on the SFT dialogues for the critic's random encoder first (the paper's
        # critic starts from a pretrained RoBERTa). 0 turns it off.
        "critic_pretrain.steps": 300, "critic_pretrain.lr": 3e-3,
        # The critic reads each utterance after the dialogue it answers, so that it can see a
        # question asked before (the official critic encodes the utterance alone).
        "model.critic_action": "in_context",
    }, micro={
        "model.critic_action": "utterance",
        "rollout_size": 4, "eval_size": 4, "env.max_turns": 4, "sft.steps": 4, "sft.batch_size": 8, "sft.dialogues": 4,
    }, more={
        # 4x the tiny preset's learner steps (closer to the official update-to-data ratio: 50 critic
        # steps of 256 per 128 dialogues) and the critic's heads started at a lost game's value
        # (-(1 - 0.95^12) / 0.05 = -9.2), not 0, which TD would close by about 0.5% a step.
        "weak": {"sft.experts": "optimal,random,random,random", "iterations": 40,
                 "critic_steps": 40, "actor_steps": 12, "critic_init_value": -9.0, "model.critic_action": "utterance"},
        # ArCHer as on the weak start: 4x the tiny preset's learner steps, the critic's heads from a
        # lost 20-turn game's value (-(1 - 0.95^20) / 0.05 = -12.8).
        "small": {"env.name": "twenty_questions", "env.max_turns": 20, "model.policy": "small:gpt2",
                  "model.critic": "small:roberta", "sft.experts": "optimal",
                  "sft.dialogues": 1024, "sft.steps": 600,
                  "critic_steps": 40, "actor_steps": 12, "critic_init_value": -13.0,
                  "model.critic_action": "utterance"},
    })
