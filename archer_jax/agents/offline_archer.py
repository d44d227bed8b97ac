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

from typing import TYPE_CHECKING

from archer_jax.agents.agent import Agent, sample_actions, timed
from archer_jax.learners.batches import actor_batch, bc_batch, critic_batch
from archer_jax.learners.train_state import States

if TYPE_CHECKING:
    from archer_jax.components import Components
    from archer_jax.data.offline_replay import OfflineReplay


def critic_updates(run: Components, states: States, data: OfflineReplay) -> States:
    """``critic_steps`` IQL steps, each on a fresh uniform batch of dataset transitions."""
    c, pipeline = run.config, run.pipeline
    critic = states.critic
    for _ in range(c.critic_steps):
        sample = data.sample(run.batch)
        batch = critic_batch(
            pipeline.critic_tokenizer, sample["critic_observation"], sample["critic_action"],
            sample["critic_next_observation"], sample["critic_action"], sample["reward"], sample["terminal"],
            max_length=pipeline.max_critic_length, min_action_bucket=pipeline.action_bucket,
        )
        critic, metrics = run.learner.iql_critic_step(critic, batch)
        run.watchdog.add("critic", metrics)
    return States(states.actor, critic)


def actor_updates(run: Components, states: States, data: OfflineReplay) -> States:
    """``actor_steps`` AWR steps on the dataset's actions, weighted by the online critic's advantage."""
    c, pipeline = run.config, run.pipeline
    actor = states.actor
    for _ in range(c.actor_steps):
        sample = data.sample(run.batch)
        policy = bc_batch(pipeline.policy_tokenizer, sample["policy_observation"], sample["policy_action"],
                          max_length=pipeline.max_prompt_length, max_action_length=pipeline.max_action_length,
                          min_action_bucket=pipeline.action_bucket)
        batch = actor_batch(policy.observation, policy.action, pipeline.critic_tokenizer, sample["critic_observation"],
                            sample["critic_action"], max_length=pipeline.max_critic_length,
                            min_action_bucket=pipeline.action_bucket)
        actor, metrics = run.learner.actor_step(actor, states.critic.params, batch)
        run.watchdog.add("actor", metrics)
    return States(actor, states.critic)


def learn(run: Components, states: States, data: OfflineReplay, iteration: int) -> tuple[States, dict[str, float]]:
    """The critic every iteration; the actor too once ``warmup_iter`` iterations are done."""
    states, critic_s = timed(critic_updates, run, states, data)
    actor_s = 0.0
    if iteration > run.config.warmup_iter:
        states, actor_s = timed(actor_updates, run, states, data)
    return states, {"critic": critic_s, "actor": actor_s}


AGENT = Agent("offline_archer", act=sample_actions, learn=learn, offline=True)
