"""Offline ArCHer (OfflineArcher; Zhou et al. 2024, section 5.4): IQL critic + AWR actor on a fixed
dataset of dialogues, no rollouts.

    for critic_steps:  uniform dataset batch;  iql_critic_step (TD for Q, expectile for V, Polyak)
    after warmup_iter, for actor_steps:  uniform dataset batch;
                       actor_step on the dataset's action with the ``awr`` loss:
                       -mean(min(exp(β A), clip) · log π(a|s)),  A = min Q(s, a) - min V(s)

``learner.expectile`` 0.9 is Offline ArCHer, 0.5 its SARSA variant. The steps are
:mod:`archer_jax.learners.offline_archer` and :func:`archer_jax.learners.archer.actor_step`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

from archer_jax.agents import archer
from archer_jax.agents.agent import Agent, config_of, group
from archer_jax.data.dataset_config import DatasetConfig
from archer_jax.data.offline_replay import OfflineReplay, open_dataset
from archer_jax.learners import offline_archer
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.networks import Networks
from archer_jax.learners.offline_archer import IQLConfig
from archer_jax.learners.step_program import StepProgram
from archer_jax.learners.train_state import States
from archer_jax.parts_config import RolloutConfig


@dataclasses.dataclass(frozen=True)
class Config(archer.Config):
    """ArCHer's keys, and IQL's and AWR's (``config.learner.expectile``, ...)."""

    agent: ClassVar[str] = "offline_archer"
    dataset_actions: ClassVar[bool] = True

    learner: LearnerConfig = group(lambda: LearnerConfig(actor_loss="awr"))
    iql: IQLConfig = group(IQLConfig)  # keys of config.learner
    offline: DatasetConfig = group(DatasetConfig)
    rollout: RolloutConfig = group(RolloutConfig)

    def __post_init__(self):
        super().__post_init__()
        refuse_rollouts_ahead(self.rollout)


def refuse_rollouts_ahead(rollout: RolloutConfig) -> None:
    """An offline agent plays no rollouts (its envs only evaluate it): a staleness that asks to
    collect them ahead would be ignored, so it is refused."""
    if rollout.staleness:
        raise ValueError(f"rollout.staleness: an offline agent learns from its dataset and plays no rollouts "
                         f"to collect ahead; set 0, not {rollout.staleness}")


def iql_critic_step(networks: Networks, tx, learner, iql: IQLConfig) -> StepProgram:
    """The IQL critic step (TD for Q, expectile for V, Polyak), compiled."""
    step = functools.partial(offline_archer.iql_critic_step, networks.critic_graphdef, tx, learner.gamma, learner.tau,
                             iql.expectile, iql.iql_v_target)
    return networks.compile_step(step, networks.critic_shardings(tx), networks.critic_batch_shardings())


class OfflineDataset:
    """What an offline agent learns from: its dataset (:mod:`archer_jax.data`), not rollouts."""

    learns_from_rollouts = False

    def new_replay(self, checkpoint: dict | None = None) -> OfflineReplay:
        """The dataset (``checkpoint``: the dataset state a resume restored)."""
        return open_dataset(self.parts.config, self.parts.workdir, self.parts.pipeline, checkpoint)

    def resume_replay(self, restored: dict) -> OfflineReplay:
        """The dataset drawing on from the checkpoint's sampler state."""
        return self.new_replay(restored).resume(restored)

    def pi_decodes(self, iterations: int) -> float:
        """None: the dataset's actions are the critic's and the actor's."""
        return 0.0


class OfflineArCHer(OfflineDataset, Agent):
    """IQL critic steps every iteration, AWR actor steps after ``warmup_iter``, on the dataset
    (ArCHer's iteration, :func:`archer.critic_then_actor`, with these critic and actor updates)."""

    name = "offline_archer"
    Config = Config

    @classmethod
    def config_of(cls, run_config) -> Config:
        return config_of(Config, run_config, groups={"iql": "learner"})

    def __init__(self, parts, config: Config):
        super().__init__(parts, config)
        self.critic_step = iql_critic_step(self.networks, self.critic_tx, config.learner, config.iql)
        self.actor_step = archer.actor_step(self.networks, self.actor_tx, self.critic_tx, config.learner, config.iql)

    @classmethod
    def actor_waits_for_warmup(cls, config: Config) -> bool:
        """The actor steps start after ``warmup_iter`` critic-only iterations."""
        return config.actor_steps > 0

    # ArCHer's critic start, programs and iteration, with the IQL and AWR updates below.
    init_critic = archer.init_critic
    programs = archer.critic_and_actor_programs
    learn = archer.critic_then_actor

    def critic_updates(self, states: States, data: OfflineReplay, iteration: int) -> States:
        """``critic_steps`` IQL steps, each on a fresh uniform batch of dataset transitions."""
        parts, critic = self.parts, states.critic
        for _ in range(self.config.critic_steps):
            sample = data.sample(parts.batch)
            critic, metrics = self.critic_step(critic, parts.pipeline.critic_batch(sample, sample["critic_action"]))
            parts.metrics.add("critic", metrics)
        return States(states.actor, critic)

    def actor_updates(self, states: States, data: OfflineReplay, iteration: int) -> States:
        """``actor_steps`` AWR steps on the dataset's actions, weighted by the online critic's advantage."""
        parts, actor = self.parts, states.actor
        for _ in range(self.config.actor_steps):
            sample = data.sample(parts.batch)
            actor, metrics = self.actor_step(actor, states.critic.params, parts.pipeline.dataset_actor_batch(sample))
            parts.metrics.add("actor", metrics)
        return States(actor, states.critic)
