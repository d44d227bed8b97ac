"""A trained run, loaded back from its workdir: its config, its agent and a checkpoint's networks.

    run = TrainedRun.load("runs/20q_tiny")                 # the newest checkpoint that loads
    run = TrainedRun.load("runs/20q_tiny", checkpoint=20)  # or one by its iteration
    episodes = run.play(games=64, seed=0, sampled=False)   # greedy, the run's own evaluation games
    run.export_policy("exported/20q_tiny")                 # a Hugging Face directory
    run.close()

The config is the workdir's ``config.json`` (the one the run used, with every override and
applied change). Nothing in the workdir is written by loading or playing; ``export_policy``
writes only where it is told.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx

from archer_jax import models, rollout
from archer_jax.agents.agent import Agent
from archer_jax.config import RunConfig, validate
from archer_jax.errors import ConfigError
from archer_jax.learners.train_state import States
from archer_jax.parts import EVAL
from archer_jax.run import config_changes
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.run.loop import build_agent


@dataclasses.dataclass
class TrainedRun:
    """A workdir's config, its agent (built on its parts), and the networks of one checkpoint."""

    workdir: Path
    config: RunConfig
    agent: Agent
    states: States
    checkpoint: int

    @classmethod
    def load(cls, workdir: str | Path, checkpoint: int | None = None) -> TrainedRun:
        """The run in ``workdir`` at ``checkpoint`` (None: the newest that loads); a
        :class:`ConfigError` in one line when there is no run or no such checkpoint."""
        workdir = Path(workdir).expanduser()
        recorded = config_changes.recorded(workdir)
        if recorded is None:
            raise ConfigError(f"--workdir: {workdir} has no readable config.json; it is not a run's workdir "
                              "(python -m archer_jax.train writes one there)")
        config = validate(ml_collections.ConfigDict(recorded), weights=False)
        checkpoints = Checkpoints(workdir / "checkpoints")
        steps = checkpoints.all_steps()
        if not steps:
            raise ConfigError(f"--workdir: {workdir} holds no checkpoint yet")
        if checkpoint is not None and checkpoint not in steps:
            raise ConfigError(f"--checkpoint: {workdir} has no checkpoint {checkpoint}; it has {', '.join(map(str, steps))}")
        agent = build_agent(config, workdir)
        try:
            fresh = agent.init_states()
            if checkpoint is None:
                found = checkpoints.restore_latest(actor=fresh.actor, critic=fresh.critic)
                checkpoint, (actor, critic, _, _) = found
            else:
                actor, critic, _, _ = checkpoints.restore(checkpoint, actor=fresh.actor, critic=fresh.critic)
        except BaseException:
            agent.parts.close()
            raise
        return cls(workdir, config, agent, States(actor, critic), checkpoint)

    def play(self, games: int, seed: int = 0, sampled: bool = False) -> list[rollout.Episode]:
        """``games`` dialogues of the env's evaluation split with the agent's acting rule, greedy
        (CHAI: its choice among samples) or ``sampled`` at the run's sampling settings. Seed 0 plays
        the games (and, sampled, the keys) of the run's own evaluations; another seed, others."""
        seeds = game_seeds(games, seed)
        parts = self.agent.parts
        key = parts.key_for(EVAL, 1) if sampled else parts.key_for(EVAL)  # as the run's evaluations
        if seed:
            key = jax.random.fold_in(key, seed)
        return rollout.play_games(self.agent.parts, self.agent.act, self.states, seeds, key, greedy=not sampled,
                                  label="sampled games" if sampled else "greedy games", split="eval")

    def export_policy(self, directory: str | Path) -> Path:
        """The checkpoint's policy as a Hugging Face model directory (weights, config, tokenizer)."""
        parts = self.agent.parts
        policy = parts.actor_module.policy
        nnx.update(policy, parts.networks.policy_params(self.states.actor))
        return models.save_pretrained(policy, Path(directory).expanduser(), tokenizer=parts.pipeline.policy_tokenizer)

    def close(self) -> None:
        self.agent.parts.close()

    def __enter__(self) -> TrainedRun:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def game_seeds(games: int, seed: int = 0) -> list[int]:
    """The env seeds of ``games`` evaluation games: seed 0, the run's own (``EVAL_SEED + i``)."""
    if seed == 0:
        return [rollout.EVAL_SEED + i for i in range(games)]
    return [int(s) for s in np.random.SeedSequence([rollout.EVAL_SEED, seed]).generate_state(games)]
