"""Token-level PPO over multi-turn dialogues: the paper's on-policy baseline, with the advantage
estimator of ``config.ppo.adv_estimator`` (:mod:`archer_jax.learners.ppo_estimators`).

    for each iteration (the loop has just rolled out rollout_size dialogues with the policy;
                        grpo: rollout_group_size of them per game):
        archer_hierarchical: critic_steps of ArCHer's TD critic on the replay buffer (off-policy)
        one pass over this iteration's transitions: log π_old(a_t), V_old,t (and log π_ref) per token
        the dialogues' tokens as rows (turns one after the other, each turn's reward at its last
        token): the estimator gives A_t and R_t
        ppo.epochs passes over the transitions in shuffled minibatches of batch_size x
        grad_accum_steps: one PPO step each (:func:`archer_jax.learners.ppo.ppo_step`)

Only the newest rollout is learned from (PPO is on-policy); the replay buffer keeps older ones
for the utterance critic of ``archer_hierarchical``.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np

from archer_jax.agents.agent import Agent, sample_actions, timed
from archer_jax.agents.archer import critic_updates, policy_pi_actions
from archer_jax.learners import ppo_estimators as advantages  # PPO's advantage estimators by name
from archer_jax.learners.batches import MIN_BUCKET, bc_batch, pad
from archer_jax.learners.ppo import PPOBatch, PPOConfig
from archer_jax.learners.train_state import States
from archer_jax.models.tokenizer import Tokens, next_power_of_two
from archer_jax.replay import ReplayBuffer

if TYPE_CHECKING:
    from archer_jax.components import Components


def latest_positions(replay: ReplayBuffer, episodes: int) -> np.ndarray:
    """The buffer positions of the newest ``episodes`` dialogues' transitions, dialogue by
    dialogue, each in turn order."""
    episode = replay.columns["episode"][: len(replay)]
    positions = np.flatnonzero(episode > episode.max() - episodes)
    age = (positions - replay.next) % replay.capacity  # insertion order, also in a full ring
    return positions[np.lexsort((age, episode[positions]))]


class Layout(NamedTuple):
    """Where each transition's action tokens sit in its dialogue's row (:class:`TokenRows`)."""

    row: np.ndarray  # [transitions] the dialogue's row
    start: np.ndarray  # [transitions] the offset of the utterance's first token in the row
    lengths: np.ndarray  # [transitions] action tokens
    shape: tuple[int, int]  # (dialogues, tokens per row: a power of two)

    @classmethod
    def of(cls, episodes: np.ndarray, lengths: np.ndarray) -> Layout:
        """``episodes``: each transition's dialogue number, grouped and in turn order."""
        _, row = np.unique(episodes, return_inverse=True)
        ends = np.cumsum(lengths)
        row_start = np.zeros(row.max() + 1, np.int64)
        firsts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        row_start[row[firsts]] = ends[firsts] - lengths[firsts]
        start = ends - lengths - row_start[row]
        width = next_power_of_two(int((start + lengths).max()))
        return cls(row, start, lengths, (int(row.max()) + 1, width))

    def _flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        transition = np.repeat(np.arange(len(self.lengths)), self.lengths)
        token = np.arange(len(transition)) - np.repeat(np.cumsum(self.lengths) - self.lengths, self.lengths)
        return transition, token, self.row[transition], self.start[transition] + token

    def to_rows(self, per_token: np.ndarray) -> np.ndarray:
        """``[transitions, action_len]`` to ``[dialogues, tokens]`` (0 elsewhere)."""
        transition, token, row, col = self._flat()
        out = np.zeros(self.shape, np.float32)
        out[row, col] = per_token[transition, token]
        return out

    def ends(self, per_turn: np.ndarray) -> np.ndarray:
        """``[transitions]`` values placed at each utterance's last token of its row."""
        out = np.zeros(self.shape, np.float32)
        keep = self.lengths > 0
        out[self.row[keep], (self.start + self.lengths - 1)[keep]] = per_turn[keep]
        return out

    def from_rows(self, rows: np.ndarray, action_len: int) -> np.ndarray:
        """``[dialogues, tokens]`` back to ``[transitions, action_len]``."""
        transition, token, row, col = self._flat()
        out = np.zeros((len(self.lengths), action_len), np.float32)
        out[transition, token] = np.asarray(rows)[row, col]
        return out


def trimmed(tokens: Tokens) -> Tokens:
    """Left-padded rows cut to the length bucket of their longest row: a minibatch of early turns
    runs a shorter (separately compiled) program than the rollout's longest observation would."""
    longest = int(tokens.mask.sum(axis=1).max())
    length = min(tokens.ids.shape[1], max(MIN_BUCKET, next_power_of_two(longest)))
    return Tokens(tokens.ids[:, -length:], tokens.mask[:, -length:])


@functools.lru_cache(maxsize=None)
def _estimate(config: PPOConfig):
    """The configured estimator, jitted (compiled once per row shape)."""
    return jax.jit(lambda rows: advantages.get(config.adv_estimator).fn(rows, config))


def _in_chunks(fn, count: int, size: int) -> list[np.ndarray]:
    """``fn(index)`` over ``count`` rows in chunks of ``size`` (the last filled with repeats), cut back to ``count``."""
    index = np.resize(np.arange(count), math.ceil(count / size) * size)
    outs = [fn(index[i : i + size]) for i in range(0, len(index), size)]
    return [np.concatenate(parts)[:count] for parts in zip(*outs)]


def rollout_targets(run: Components, states: States, sample: dict, first_episode: int) -> PPOBatch:
    """This rollout's whole PPO batch: tokens, ``log π_old``, ``V_old`` (and ``log π_ref``), and the
    estimator's advantages and returns per action token."""
    c, pipeline, learner, config = run.config, run.pipeline, run.learner, run.learner.ppo
    tokens = bc_batch(pipeline.policy_tokenizer, sample["policy_observation"], sample["policy_action"],
                      max_length=pipeline.max_prompt_length, max_action_length=pipeline.max_action_length,
                      min_action_bucket=pipeline.action_bucket)
    obs, act = tokens.observation, tokens.action
    take = lambda t, i: Tokens(t.ids[i], t.mask[i])  # noqa: E731
    logprobs, values = _in_chunks(lambda i: learner.token_stats(states.actor, trimmed(take(obs, i)), take(act, i)),
                                  len(obs.ids), run.batch)
    reference = np.zeros_like(logprobs)
    if config.kl_coef:
        reference, _ = _in_chunks(lambda i: learner.token_stats(states.actor, trimmed(take(obs, i)), take(act, i),
                                                                reference=True),
                                  len(obs.ids), run.batch)
    estimator = config.estimator
    layout = Layout.of(np.asarray(sample["episode"]), act.mask.sum(axis=1))
    turn_q = np.zeros(len(obs.ids), np.float32)
    if estimator.needs_critic:
        critic_obs = pad(pipeline.critic_tokenizer, sample["critic_observation"], pipeline.max_critic_length)
        critic_act = pad(pipeline.critic_tokenizer, sample["critic_action"], pipeline.max_critic_length,
                         min_bucket=pipeline.action_bucket)
        turn = learner.utterance_advantage if config.critic_baseline else learner.utterance_q  # Q - V, or Q
        (turn_q,) = _in_chunks(lambda i: (turn(states.critic.params, take(critic_obs, i), take(critic_act, i)),),
                               len(obs.ids), run.batch)
    group = (np.unique(sample["episode"]) - first_episode) // c.rollout_group_size
    rows = advantages.TokenRows(
        rewards=layout.ends(np.asarray(sample["reward"], np.float32)), values=layout.to_rows(values),
        mask=layout.to_rows(act.mask.astype(np.float32)), turn_end=layout.ends(np.ones(len(obs.ids), np.float32)),
        turn_values=layout.ends(turn_q), group=group.astype(np.int32),
    )
    adv, ret = _estimate(config)(rows)
    width = act.ids.shape[1]
    return PPOBatch(obs, act, logprobs, values, layout.from_rows(adv, width), layout.from_rows(ret, width), reference)


def ppo_updates(run: Components, states: States, replay: ReplayBuffer, iteration: int) -> States:
    """PPO's epochs over the newest rollout's transitions, in shuffled minibatches of ``run.batch``."""
    c = run.config
    positions = latest_positions(replay, c.rollout_size)
    sample = replay.gather(positions)
    first_episode = int(np.min(sample["episode"]))
    batch = rollout_targets(run, states, sample, first_episode)
    count, size = len(positions), run.batch
    rng = np.random.default_rng([c.seed, iteration])
    actor = states.actor
    for _ in range(run.learner.ppo.epochs):
        order = np.resize(rng.permutation(count), math.ceil(count / size) * size)  # the last minibatch wraps round
        for start in range(0, len(order), size):
            index = order[start : start + size]
            minibatch = jax.tree.map(lambda x: x[index], batch)
            minibatch = minibatch._replace(observation=trimmed(minibatch.observation))
            actor, metrics = run.learner.ppo_step(actor, minibatch)
            run.watchdog.add("actor", metrics)
    return States(actor, states.critic)


def learn(run: Components, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
    """``archer_hierarchical``: the utterance critic's TD steps first, and PPO only after
    ``warmup_iter`` iterations (as ArCHer's actor); other estimators: PPO every iteration."""
    critic_s = actor_s = 0.0
    hierarchical = run.learner.ppo.estimator.needs_critic
    if hierarchical:
        states, critic_s = timed(critic_updates, run, states, replay, iteration, policy_pi_actions)
    if not hierarchical or iteration > run.config.warmup_iter:
        states, actor_s = timed(ppo_updates, run, states, replay, iteration)
    return states, {"critic": critic_s, "actor": actor_s}


def uses_critic(config) -> bool:
    """Only ``archer_hierarchical`` builds the utterance critic."""
    return advantages.get(config.ppo.adv_estimator).needs_critic


AGENT = Agent("ppo", act=sample_actions, learn=learn, needs_critic=uses_critic, ppo=True)
