"""Offline-to-online: a run that starts from the networks of another run (``config.init_from``).

    python -m archer_jax.train --config=configs/20q_offline.py:tiny --workdir=runs/offline
    python -m archer_jax.train --config=configs/20q.py:tiny --config.sft.steps=0 \\
        --config.init_from=runs/offline --workdir=runs/online

The new run takes the policy (and, when both runs have one, the double critic with its target)
from the newest checkpoint of ``init_from`` (a run's workdir or its ``checkpoints`` directory);
optimizers, counters and the replay buffer start fresh. The networks must have the same shapes
(the same ``model.*`` keys); anything else is a one-line error naming the key.

``config.model.critic_init`` starts the critic (and its target) from an official ArCHer critic
instead: the ``critic_init.safetensors`` that ``python -m archer_jax.import_official trainer.pt``
writes (:func:`critic_from_file`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from archer_jax.run.checkpoint import Checkpoints
from archer_jax.errors import ConfigError
from archer_jax.learners import official_critic
from archer_jax.learners.train_state import States
from archer_jax.models.weight_rules import MappingError

if TYPE_CHECKING:
    from archer_jax.agents.agent import Agent

log = logging.getLogger("archer_jax")


def checkpoint_directory(init_from: str | Path) -> Path:
    """The checkpoints directory of ``init_from`` (a workdir or the directory itself)."""
    path = Path(init_from).expanduser()
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if not directory.is_dir():
        raise ConfigError(f"config.init_from: {path} is not a run's workdir (no checkpoints directory)")
    return directory


def initial_states(agent: Agent, states: States, init_from: str | Path) -> States:
    """``states`` with the policy (and critic) of the newest checkpoint in ``init_from``."""
    directory = checkpoint_directory(init_from)
    checkpoints = Checkpoints(directory)
    try:
        step = checkpoints.latest()
        if step is None:
            raise ConfigError(f"config.init_from: {directory} holds no checkpoint")
        with_critic = states.critic is not None and (directory / str(step) / "critic").is_dir()
        actor, critic, _, _ = checkpoints.restore(step, actor=states.actor, critic=states.critic if with_critic else None)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - shapes or files that do not match this run's networks
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ConfigError(f"config.init_from: the checkpoint in {directory} does not fit this run's networks "
                          f"(same model.* keys needed): {first}") from None
    finally:
        checkpoints.close()
    new_actor = agent.init_actor(actor.params)
    new_critic = agent.init_critic(critic.params, critic.target) if with_critic else states.critic
    log.info("started from %s step %d: policy%s; fresh optimizers", directory, step,
             " and critic" if with_critic else " (the critic starts fresh)" if states.critic is not None else "")
    return States(new_actor, new_critic)


def critic_from_file(agent: Agent, states: States, path: str | Path) -> States:
    """``states`` with the critic and target critic of an official critic file (official names
    under ``critic.`` and ``target_critic.``); a fresh optimizer."""
    from safetensors.numpy import load_file

    if states.critic is None:
        raise ConfigError(f"config.model.critic_init: agent {agent.name!r} has no critic to start")
    path = Path(path).expanduser()
    try:
        tensors = load_file(path)
    except Exception as e:  # noqa: BLE001 - safetensors raises several kinds for a bad file
        raise ConfigError(f"config.model.critic_init: cannot read {path}: {e}") from None
    config = agent.parts.encoder_config  # the critic encoder's RobertaConfig
    template = states.critic.params
    try:
        params = official_critic.params(tensors, template, config, "critic.")
        target = official_critic.params(tensors, template, config, "target_critic.")
    except MappingError as e:
        raise ConfigError(f"config.model.critic_init: {path}: {e}") from None
    log.info("started the critic and its target from the official critic %s; a fresh optimizer", path)
    return States(states.actor, agent.init_critic(params, target))
