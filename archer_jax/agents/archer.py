"""ArCHer, online (Zhou et al. 2024, Algorithm 1): its config, its compiled steps, its iteration.

    for critic_steps:  uniform replay batch; a_π ~ π(·|s) fresh;  critic_step (TD, then Polyak)
    after warmup_iter, for actor_steps:  uniform replay batch; a_π ~ π(·|s) fresh;
                       actor_step with A = min Q(s, a_π) - min V(s) of the online critic

The pure steps are :mod:`archer_jax.learners.archer`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import ClassVar

from archer_jax.agents.agent import Agent, group, timed
from archer_jax.agents.programs import Program, after_warmup, input_shapes
from archer_jax.errors import TrainingError
from archer_jax.learners import archer, packed_batches
from archer_jax.learners.critic import with_initial_value
from archer_jax.learners.learner_config import LearnerConfig, loss_options
from archer_jax.learners.micro_batching import AUTO
from archer_jax.learners.networks import Networks
from archer_jax.learners.step_program import StepProgram
from archer_jax.learners.train_state import States
from archer_jax.parts import ACTOR, CRITIC
from archer_jax.replay import ReplayBuffer
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.config_keys import key

log = logging.getLogger(__name__)

OFFLINE_LOSSES = ("awr",)  # actor losses that weigh a dataset's actions: offline agents only


def offline_loss_error(agent: str, loss: str) -> ValueError:
    """The error of an actor loss for the wrong kind of agent."""
    return ValueError(f"learner.actor_loss: offline_archer's actor is 'awr', which weighs a dataset's actions "
                      f"and suits offline agents only (agent {agent!r}, actor_loss {loss!r})")


@dataclasses.dataclass(frozen=True)
class Config:
    """ArCHer's keys: ``config.learner``, and the loop's step counts (top-level keys)."""

    agent: ClassVar[str] = "archer"  # the agent whose config this is (for errors)
    dataset_actions: ClassVar[bool] = False  # its actor weighs a dataset's actions (offline ArCHer's AWR)

    learner: LearnerConfig = group(LearnerConfig)
    critic_steps: int = key(50, "critic optimizer steps per iteration", official="`epochs`")
    actor_steps: int = key(3, "actor optimizer steps per iteration, after warmup_iter", official="`actor_epochs`")
    warmup_iter: int = key(20, "first iterations that train the critic only", official="`warmup_iter`")
    # TD with a Polyak target closes the values' gap to the returns' scale by about tau * (1 - gamma)
    # a step (docs/algorithms.md, section 2): started near that scale, the critic learns the differences.
    critic_init_value: float = key(
        0.0, "the critic's Q and V heads start near this value (their output bias; 0 = the official init): about the "
        "playing policy's values (near -1/(1 - gamma) when most games are lost at the turn limit)",
        official="— (the official heads start at 0)")

    def __post_init__(self):
        for name in ("critic_steps", "actor_steps", "warmup_iter"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if not math.isfinite(self.critic_init_value):
            raise ValueError(f"critic_init_value: must be finite, got {self.critic_init_value}")
        if (self.learner.actor_loss in OFFLINE_LOSSES) != self.dataset_actions:
            raise offline_loss_error(self.agent, self.learner.actor_loss)


def packed_micro_batches(networks: Networks) -> int | str:
    """A packed step's micro-batch size, in groups: one group a device when the transitions of a
    micro-batch are known (each micro-batch packs its own, :func:`packed_batches.group_count`),
    else "auto"."""
    fixed = packed_batches.micro_batch_transitions(networks.micro_batch_size, networks.micro_batch_limit) is not None
    return shd.batch_size_multiple(networks.mesh) if fixed else AUTO


def critic_step(networks: Networks, tx, learner: LearnerConfig) -> StepProgram:
    """ArCHer's critic step (TD, then Polyak), compiled: on packed batches with ``learner.pack_critic``
    (micro-batches of whole groups), else on padded ones."""
    if learner.pack_critic:
        return networks.compile_step(functools.partial(archer.packed_critic_step, networks.critic_graphdef, tx,
                                                       learner.gamma, learner.tau),
                                     networks.critic_shardings(tx), packed_batches.batch_shardings(networks.batch_sharding),
                                     micro_batch_size=packed_micro_batches(networks))
    return networks.compile_step(functools.partial(archer.critic_step, networks.critic_graphdef, tx, learner.gamma,
                                                   learner.tau),
                                 networks.critic_shardings(tx), networks.critic_batch_shardings())


def actor_step(networks: Networks, tx, critic_tx, learner: LearnerConfig, *option_configs,
               with_target: bool = False, packed: bool = False) -> StepProgram:
    """The actor step with the online critic's advantage (its loss from ``learner.actor_loss``, its
    log-probs under ``learner.distribution``: the one the actions were sampled from), compiled;
    ``packed``: on packed batches (micro-batches of whole groups)."""
    step = functools.partial(archer.packed_actor_step if packed else archer.actor_step, networks.actor_graphdef,
                             networks.critic_graphdef, tx, learner.actor_loss,
                             loss_options=loss_options(learner, *option_configs), distribution=learner.distribution,
                             center_advantage=learner.center_advantage)
    shardings = networks.actor_shardings(tx, with_target), networks.critic_shardings(critic_tx).params
    if packed:
        return networks.compile_step(step, *shardings, packed_batches.actor_batch_shardings(networks.batch_sharding),
                                     micro_batch_size=packed_micro_batches(networks))
    return networks.compile_step(step, *shardings, networks.actor_batch_shardings())


def init_critic(agent: Agent, params=None, target=None):
    """The critic's state with a fresh optimizer: from ``params`` and ``target`` (another run's),
    else the built critic with its heads' output bias at ``critic_init_value``."""
    if params is None and agent.config.critic_init_value:
        params = with_initial_value(agent.networks.initial_critic_params(), agent.config.critic_init_value)
    return Agent.init_critic(agent, params, target)


def group_factor(agent: Agent) -> int:
    """The groups a device of packed batches when "auto" chooses micro-batches by memory (no
    CPU limit): the fewest of 1, 2, 4, ... whose critic step fits at the run's longest buckets in
    micro-batches of one group a device (decided once, on first use, the same on every host and
    every resume). 1 where micro-batches hold a known number of transitions."""
    if getattr(agent, "_group_factor", None) is None:
        agent._group_factor = _group_factor(agent)
    return agent._group_factor


def _group_factor(agent: Agent) -> int:
    networks, batch = agent.networks, agent.parts.batch
    fixed = packed_batches.micro_batch_transitions(networks.micro_batch_size, networks.micro_batch_limit)
    if fixed is not None or not agent.config.learner.pack_critic:
        return 1
    multiple = shd.batch_size_multiple(networks.mesh)
    shapes, per_device, factor = input_shapes(agent.parts), batch // multiple, 1
    while True:
        try:
            agent.critic_step.layout(agent.abstract_critic(), shapes.packed_critic_batch(batch, multiple * factor))
            return factor
        except TrainingError:
            if 2 * factor > per_device or per_device % (2 * factor):
                raise
            log.info("critic_step: one group of %d transitions a device does not fit; packing %d groups a device",
                     per_device // factor, 2 * factor)
            factor *= 2


def critic_groups(agent: Agent, transitions: int) -> int:
    """The groups a packed critic or actor batch of ``transitions`` is cut in
    (:func:`packed_batches.group_count`, :func:`group_factor`)."""
    networks = agent.networks
    return packed_batches.group_count(transitions, shd.batch_size_multiple(networks.mesh), networks.micro_batch_size,
                                      networks.micro_batch_limit, factor=group_factor(agent))


def critic_program(agent: Agent) -> Program:
    """The critic step, ``critic_steps`` times an iteration (its inputs at the longest buckets)."""
    packed = agent.config.learner.pack_critic
    return Program("critic_step", agent.critic_step,
                   lambda s, rows: (agent.abstract_critic(), s.packed_critic_batch(rows, critic_groups(agent, rows))
                                    if packed else s.critic_batch(rows)),
                   agent.config.critic_steps)


def critic_and_actor_programs(agent: Agent, iterations: int) -> list[Program]:
    """The critic step ``critic_steps`` times an iteration, the actor step ``actor_steps`` times after the warm-up."""
    c = agent.config
    packed = getattr(agent, "packed_actor", False)
    return [critic_program(agent),
            Program("actor_step", agent.actor_step,
                    lambda s, rows: (agent.abstract_actor(), agent.abstract_critic().params,
                                     s.packed_actor_batch(rows, critic_groups(agent, rows)) if packed
                                     else s.actor_batch(rows)),
                    after_warmup(c.actor_steps, c.warmup_iter, iterations))]


def critic_phase(agent: Agent, states: States, replay: ReplayBuffer, iteration: int) -> States:
    """``critic_steps`` critic steps, each on a fresh uniform batch with fresh ``a_π`` (the agent's
    ``pi_actions``). The policy is fixed in the phase: every step's batch is drawn first and all
    their ``a_π`` in a few large decodes (each row with its step's key: what the step's own decode
    would draw), unless the agent's ``a_π`` reads the critic (CHAI's choice by the target critic,
    which each step moves): then each step draws its own. The actor phase draws per step: each
    actor step changes the policy its next ``a_π`` comes from."""
    parts, critic = agent.parts, states.critic
    steps = range(agent.config.critic_steps)
    samples = [replay.sample(parts.batch) for _ in steps]
    keys = [parts.key_for(CRITIC, iteration, step) for step in steps]
    drawn = agent.pi_actions_steps(states, samples, keys) if samples and not agent.pi_reads_critic else None
    for step, sample in enumerate(samples):
        pi_texts = drawn[step] if drawn is not None else agent.pi_actions(States(states.actor, critic), sample, keys[step])
        pi_rows = parts.pipeline.critic_action_rows(sample["observation"], pi_texts)
        batch = (parts.pipeline.packed_critic_batch(sample, pi_rows, critic_groups(agent, parts.batch))
                 if agent.config.learner.pack_critic else parts.pipeline.critic_batch(sample, pi_rows))
        critic, metrics = agent.critic_step(critic, batch)
        parts.metrics.add("critic", metrics)
    return States(states.actor, critic)


def actor_phase(agent: Agent, states: States, replay: ReplayBuffer, iteration: int) -> States:
    """``actor_steps`` policy-gradient steps with the online critic's advantage of a fresh ``a_π``."""
    parts, actor = agent.parts, states.actor
    for step in range(agent.config.actor_steps):
        sample = replay.sample(parts.batch)
        key = parts.key_for(ACTOR, iteration, step)
        groups = critic_groups(agent, parts.batch) if agent.packed_actor else None
        batch = parts.acting.actor_batch(agent.policy(States(actor, states.critic)), sample, key, groups=groups)
        actor, metrics = agent.actor_step(actor, states.critic.params, batch)
        parts.metrics.add("actor", metrics)
    return States(actor, states.critic)


def critic_then_actor(agent: Agent, states: States, replay, iteration: int) -> tuple[States, dict[str, float]]:
    """The agent's critic updates every iteration; its actor updates too once ``warmup_iter``
    iterations are done (ArCHer's iteration, online or offline)."""
    states, critic_s = timed(agent.critic_updates, states, replay, iteration)
    actor_s = 0.0
    if iteration > agent.config.warmup_iter:
        states, actor_s = timed(agent.actor_updates, states, replay, iteration)
    return states, {"critic": critic_s, "actor": actor_s}


class ArCHer(Agent):
    """Online ArCHer: the critic every iteration, the actor after ``warmup_iter`` (the phases above)."""

    name = "archer"
    Config = Config

    def __init__(self, parts, config: Config):
        super().__init__(parts, config)
        self.critic_step = critic_step(self.networks, self.critic_tx, config.learner)
        self.packed_actor = config.learner.pack_actor
        self.actor_step = actor_step(self.networks, self.actor_tx, self.critic_tx, config.learner,
                                     packed=self.packed_actor)

    @classmethod
    def actor_waits_for_warmup(cls, config: Config) -> bool:
        """The actor steps start after ``warmup_iter`` critic-only iterations."""
        return config.actor_steps > 0

    def init_critic(self, params=None, target=None):
        return init_critic(self, params, target)

    def programs(self, iterations: int) -> list[Program]:
        return critic_and_actor_programs(self, iterations)

    def pi_decodes(self, iterations: int) -> float:
        """One a_π decode for each actor step, and for each critic step where a_π reads the
        critic (CHAI); the other critic steps' a_π are :meth:`pi_phase_rows`."""
        return sum(p.per_iteration for p in self.programs(iterations) if p.name != "critic_step" or self.pi_reads_critic)

    def pi_phase_rows(self, iterations: int) -> int:
        """The a_π rows a critic phase draws together: all its steps' (:func:`critic_phase`)."""
        return 0 if self.pi_reads_critic else self.config.critic_steps * self.parts.batch

    def critic_updates(self, states: States, replay: ReplayBuffer, iteration: int) -> States:
        return critic_phase(self, states, replay, iteration)

    def actor_updates(self, states: States, replay: ReplayBuffer, iteration: int) -> States:
        return actor_phase(self, states, replay, iteration)

    def learn(self, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
        return critic_then_actor(self, states, replay, iteration)
