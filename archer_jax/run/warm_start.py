"""How a new run starts, before its first iteration: SFT on demonstrations (or its result from
``config.sft.cache``), the critic's masked-LM pretraining, another run's networks (``config.init_from``)
or an official critic (``config.model.critic_init``), in that order (:func:`start`).

    python -m archer_jax.train --config=configs/20q_offline.py:tiny --workdir=runs/offline
    python -m archer_jax.train --config=configs/20q.py:tiny --config.sft.steps=0 \\
        --config.init_from=runs/offline --workdir=runs/online

``init_from`` (offline-to-online) takes the policy (and, when both runs have one, the double critic
with its target) from the newest checkpoint of another run (its workdir or its ``checkpoints``
directory); optimizers, counters and the replay buffer start fresh. The networks must have the
same shapes (the same ``model.*`` keys); anything else is a one-line error naming the key.

``config.model.critic_init`` starts the critic (and its target) from an official ArCHer critic
instead: the ``critic_init.safetensors`` that ``python -m archer_jax.import_official trainer.pt``
writes (:func:`critic_from_file`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax

from archer_jax.errors import ConfigError, TrainingError
from archer_jax.learners import official_critic
from archer_jax.learners.micro_batching import auto_limit
from archer_jax.learners.train_state import States
from archer_jax.models.weight_rules import MappingError
from archer_jax.pretraining import critic as critic_pretraining, sft, sft_cache
from archer_jax.records import report
from archer_jax.records.checkpoint import Checkpoints, checkpoint_directory
from archer_jax.records.loop_state import LoopState
from archer_jax.records.progress import progress_bar
from archer_jax.runtime import distributed

if TYPE_CHECKING:
    from archer_jax.agents.agent import Agent

log = logging.getLogger("archer_jax")


def start(agent: Agent, states: States, writers: report.Writers, loop: LoopState) -> States:
    """A new run's states after its warm starts (each one's record into ``loop``): SFT, the
    critic's pretraining, ``init_from``, ``model.critic_init``, as the config asks."""
    c = agent.parts.config
    pretrain_critic = bool(c.critic_pretrain.steps) and states.critic is not None
    if c.sft.steps or pretrain_critic:
        demonstrations = sft.demonstrations(c)
    if c.sft.steps:
        states, loop.sft = sft_start(agent, states, writers, demonstrations)
    if pretrain_critic:
        states, loop.critic_pretrain = critic_start(agent, states, writers, demonstrations)
    if c.init_from:  # offline-to-online: another run's policy (and critic), fresh optimizers
        states = initial_states(agent, states, c.init_from)
    if c.model.critic_init:  # an official ArCHer critic (archer_jax.import_official)
        states = critic_from_file(agent, states, c.model.critic_init)
    return states


def critic_start(agent: Agent, states: States, writers: report.Writers,
                      demonstrations: tuple[list[str], list[str]]) -> tuple[States, dict[str, Any]]:
    """Masked-LM pretraining of the critic's encoder on the demonstrations' texts
    (:mod:`archer_jax.pretraining.critic`; or its result from ``config.sft.cache``); the critic's
    Adam starts fresh after it and its target equals it."""
    c = agent.parts.config
    limit = auto_limit(agent.parts.mesh.devices.flat[0].platform, c.critic_pretrain.batch_size)
    critic, info, history = critic_pretraining.warm_start(agent, states.critic, *demonstrations, limit=limit)
    for step in range(0, len(history), max(1, len(history) // 50)):  # tags critic_pretrain/*
        writers.scalars(step + 1, {f"critic_pretrain/{k}": v for k, v in history[step].items()})
    log.info("critic pretraining: %d masked-LM steps on %d texts%s, loss %.3f -> %.3f", info["steps"], info["texts"],
             f", taken from the cache {info['cache']}" if "cache" in info and "seconds" not in info else "",
             info["first_loss"], info["last_loss"])
    return States(states.actor, critic), info


def sft_start(agent: Agent, states: States, writers: report.Writers,
               demonstrations: tuple[list[str], list[str]]) -> tuple[States, dict[str, Any]]:
    """SFT on the demonstrations of ``config.sft.data`` (or its result from ``config.sft.cache``);
    the actor's Adam starts fresh after it."""
    parts = agent.parts
    c = parts.config
    observations, actions = demonstrations
    limit = auto_limit(parts.mesh.devices.flat[0].platform, c.sft.batch_size)
    step, start_state = agent.sft_step(c.sft.lr, limit=limit)
    start = time.perf_counter()
    entry = None
    if c.sft.cache and distributed.multiprocess():
        log.warning("config.sft.cache: not used by a run over several processes; the SFT is done here")
    elif c.sft.cache:
        entry = sft_cache.key(start_state.params, observations, actions, _sft_settings(agent, limit))
        found = sft_cache.load(c.sft.cache, entry, start_state.params)
        if found is not None:
            params, history, info = found
            for step in range(0, len(history), max(1, len(history) // 50)):
                writers.scalars(step + 1, {f"sft/{k}": v for k, v in history[step].items()})
            info = dict(info, cache=str(Path(c.sft.cache).expanduser() / entry))
            log.info("SFT: %d steps on %d pairs, taken from the cache %s (loss %.3f -> %.3f)", c.sft.steps,
                     len(observations), info["cache"], info["first_loss"], info["last_loss"])
            return States(agent.init_actor_from_sft(params), states.critic), info
    with progress_bar(c.sft.steps, "SFT", "step") as bar:  # a log line every 30 s without a terminal

        def progress(step: int, metrics: dict) -> None:
            bar.update(1)
            bar.set_postfix(loss=f"{metrics['loss']:.3f}")

        actor, history = sft.train(step, start_state, parts.pipeline, observations, actions,
                                   steps=c.sft.steps, batch_size=c.sft.batch_size, seed=c.sft.seed, progress=progress)
    skipped = sum(m["nonfinite"] for m in history)
    if skipped == len(history):
        raise TrainingError(f"SFT: all {skipped} steps had a non-finite loss or gradient")
    info = dict(
        pairs=len(observations), steps=c.sft.steps, first_loss=history[0]["loss"], last_loss=history[-1]["loss"],
        skipped=skipped, seconds=time.perf_counter() - start,
    )
    log.info("SFT: %d steps on %d pairs (%s), loss %.3f -> %.3f, %.1f s", c.sft.steps, len(observations),
             c.sft.data, info["first_loss"], info["last_loss"], info["seconds"])
    params = actor.params
    path = None if entry is None else sft_cache.save_or_warn(c.sft.cache, entry, params, history, info, "SFT")
    if path is not None:
        # Another run may have stored this entry first: start from the stored policy, as every later run does.
        params, stored_history, stored_info = sft_cache.load(c.sft.cache, entry, params)
        if json.dumps(stored_history) != json.dumps(history):  # NaN != NaN, but their text is equal
            log.warning("SFT: another run stored this SFT first (loss %.3f -> %.3f); starting from its result",
                        stored_info["first_loss"], stored_info["last_loss"])
            history, info = stored_history, stored_info
        info = dict(info, cache=str(path))
    for step in range(0, len(history), max(1, len(history) // 50)):  # tags sft/*, steps 1..sft.steps
        writers.scalars(step + 1, {f"sft/{k}": v for k, v in history[step].items()})
    return States(agent.init_actor_from_sft(params), states.critic), info


def _sft_settings(agent: Agent, limit: int | None) -> dict[str, Any]:
    """What an SFT's result depends on besides its demonstrations and starting parameters."""
    c = agent.parts.config
    devices = agent.parts.mesh.devices
    return dict(sft={k: getattr(c.sft, k) for k in ("steps", "lr", "batch_size", "seed")}, limit=limit,
                max_grad_norm=c.learner.max_grad_norm, remat=c.model.remat,
                precision=str(jax.config.jax_default_matmul_precision), mesh=dict(agent.parts.mesh.shape),
                devices=[devices.flat[0].platform, devices.flat[0].device_kind, devices.size])


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
