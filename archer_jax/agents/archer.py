"""ArCHer, online (Zhou et al. 2024, Algorithm 1): one iteration's updates.

    for critic_steps:  uniform replay batch; a_π ~ π(·|s) fresh;  critic_step (TD, then Polyak)
    after warmup_iter, for actor_steps:  uniform replay batch; a_π ~ π(·|s) fresh;
                       actor_step with A = min Q(s, a_π) - min V(s) of the online critic

The steps themselves are :mod:`archer_jax.learners.archer`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from archer_jax.agents.agent import ACTOR, CRITIC, Agent, sample_actions, timed
from archer_jax.learners.batches import critic_batch
from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer

if TYPE_CHECKING:
    from archer_jax.components import Components

PiActions = Callable[["Components", States, dict, object], list[str]]


def policy_pi_actions(run: Components, states: States, sample: dict, key) -> list[str]:
    """ArCHer's ``a_π``: a fresh sample from the current policy for each replayed observation."""
    return run.acting.pi_actions(run.policy(states), sample["policy_observation"], key)


def critic_updates(run: Components, states: States, replay: ReplayBuffer, iteration: int, pi_actions: PiActions) -> States:
    """``critic_steps`` critic steps, each on a fresh uniform batch with fresh ``a_π``."""
    c, pipeline = run.config, run.pipeline
    critic = states.critic
    for step in range(c.critic_steps):
        sample = replay.sample(run.batch)
        pi_texts = pi_actions(run, States(states.actor, critic), sample, run.key_for(CRITIC, iteration, step))
        batch = critic_batch(
            pipeline.critic_tokenizer, sample["critic_observation"], sample["critic_action"],
            sample["critic_next_observation"], pipeline.critic_rows(pi_texts), sample["reward"], sample["terminal"],
            max_length=pipeline.max_critic_length, min_action_bucket=pipeline.action_bucket,
        )
        critic, metrics = run.learner.critic_step(critic, batch)
        run.watchdog.add("critic", metrics)
    return States(states.actor, critic)


def actor_updates(run: Components, states: States, replay: ReplayBuffer, iteration: int) -> States:
    """``actor_steps`` policy-gradient steps with the online critic's advantage of a fresh ``a_π``."""
    c = run.config
    actor = states.actor
    for step in range(c.actor_steps):
        sample = replay.sample(run.batch)
        key = run.key_for(ACTOR, iteration, step)
        batch = run.acting.actor_batch(run.policy(States(actor, states.critic)), sample, key)
        actor, metrics = run.learner.actor_step(actor, states.critic.params, batch)
        run.watchdog.add("actor", metrics)
    return States(actor, states.critic)


def learn(run: Components, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
    """The critic every iteration; the actor too once ``warmup_iter`` iterations are done."""
    states, critic_s = timed(critic_updates, run, states, replay, iteration, policy_pi_actions)
    actor_s = 0.0
    if iteration > run.config.warmup_iter:
        states, actor_s = timed(actor_updates, run, states, replay, iteration)
    return states, {"critic": critic_s, "actor": actor_s}


AGENT = Agent("archer", act=sample_actions, learn=learn)
