"""Guess My City offline: Offline ArCHer, its SARSA variant, offline filtered BC and BC from a
fixed dataset of city dialogues, evaluated online against the embedded city oracle.

    python -m archer_jax.train --config=configs/city_offline.py:tiny --workdir=runs/city_offline_tiny
    python -m archer_jax.train --config=configs/city_offline.py --workdir=runs/city_offline \\
        --config.offline.dataset=/data/guess_my_city.json          # the official dialogue format

The default takes OfflineArcher's Twenty Questions values (configs/20q_offline.py) to the city game:
there is no published offline city setting. ``offline.dataset`` is a file (or a directory of files)
in the official format (``{"conversation": [...], "done": ..., "word": "city,country"}``); without it
the run generates dialogues of the embedded city experts. ``tiny``: the embedded models, 500
generated dialogues; ``micro``: seconds, for tests.
"""

from __future__ import annotations

import ml_collections

from archer_jax.config import PRESETS, offline_config, with_preset

__all__ = ["PRESETS", "get_config"]


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """The config for ``preset``: "" (the official values on cities), "tiny" or "micro"."""
    c = offline_config()
    c.env.name = "guess_my_city"
    c.offline.generate_episodes = 20_000
    return with_preset(c, preset, "configs/city_offline.py", tiny={
        "iterations": 30, "eval_size": 32, "critic_steps": 10, "actor_steps": 10, "bc_steps": 10, "eval_freq": 5,
        "learner.actor_lr": 1e-3, "offline.generate_episodes": 500, "rollout_size": 32,  # rollouts: unused offline
    }, micro={"eval_size": 4, "rollout_size": 4, "env.max_turns": 4, "offline.generate_episodes": 16})
