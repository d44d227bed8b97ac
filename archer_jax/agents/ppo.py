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

import dataclasses
import functools
import math
from typing import ClassVar

import jax
import numpy as np

from archer_jax.agents import archer
from archer_jax.agents.agent import Agent, NetworkSpec, config_of, group, timed
from archer_jax.agents.programs import Program, after_warmup
from archer_jax.learners import ppo_estimators, train_state
from archer_jax.learners.archer import utterance_advantage, utterance_q
from archer_jax.learners.batches import MIN_BUCKET
from archer_jax.learners.networks import Networks
from archer_jax.learners.ppo import PPOBatch, PPOConfig, ppo_step, token_stats
from archer_jax.learners.step_program import StepProgram
from archer_jax.learners.train_state import States, TrainState
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.models.tokenizer import Tokens, next_power_of_two
from archer_jax.parts_config import RolloutConfig
from archer_jax.replay import ReplayBuffer
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.precision import traced_with


@dataclasses.dataclass(frozen=True)
class Config(archer.Config):
    """ArCHer's keys (the utterance critic of ``archer_hierarchical``, the actor's learning rate),
    and PPO's (``config.ppo``)."""

    agent: ClassVar[str] = "ppo"

    ppo: PPOConfig = group(PPOConfig)
    rollout: RolloutConfig = group(RolloutConfig)

    def __post_init__(self):
        super().__post_init__()
        if self.rollout.staleness:  # log π_old is the learner's policy, not the one that played
            raise ValueError(f"rollout.staleness: PPO learns on-policy (its ratios are to the policy it starts the "
                             f"iteration with), so its dialogues cannot be collected ahead; set 0, not "
                             f"{self.rollout.staleness}")


def latest_positions(replay: ReplayBuffer, episodes: int) -> np.ndarray:
    """The buffer positions of the newest ``episodes`` dialogues' transitions, dialogue by
    dialogue, each in turn order."""
    episode = replay.columns["episode"][: len(replay)]
    positions = np.flatnonzero(episode > episode.max() - episodes)
    age = (positions - replay.next) % replay.capacity  # insertion order, also in a full ring
    return positions[np.lexsort((age, episode[positions]))]


def trimmed(tokens: Tokens) -> Tokens:
    """Left-padded rows cut to the length bucket of their longest row: a minibatch of early turns
    runs a shorter (separately compiled) program than the rollout's longest observation would."""
    longest = int(tokens.mask.sum(axis=1).max())
    length = min(tokens.ids.shape[1], max(MIN_BUCKET, next_power_of_two(longest)))
    return Tokens(tokens.ids[:, -length:], tokens.mask[:, -length:])


@functools.lru_cache(maxsize=None)
def _estimate(config: PPOConfig):
    """The configured estimator, jitted (compiled once per row shape)."""
    return jax.jit(lambda rows: ppo_estimators.get(config.adv_estimator).fn(rows, config))


def _in_chunks(fn, count: int, size: int) -> list[np.ndarray]:
    """``fn(index)`` over ``count`` rows in chunks of ``size`` (the last filled with repeats), cut back to ``count``."""
    index = np.resize(np.arange(count), math.ceil(count / size) * size)
    outs = [fn(index[i : i + size]) for i in range(0, len(index), size)]
    return [np.concatenate(parts)[:count] for parts in zip(*outs)]


def compile_ppo_step(networks: Networks, tx, ppo: PPOConfig, distribution: TokenDistribution) -> StepProgram:
    """PPO's step on a minibatch (:func:`archer_jax.learners.ppo.ppo_step`), its log-probs under
    ``distribution`` (the rollouts'), compiled."""
    return networks.compile_step(functools.partial(ppo_step, networks.actor_graphdef, tx, ppo, distribution),
                                 networks.actor_shardings(tx, ppo.kl_coef > 0),
                                 PPOBatch(networks.tokens_sharding(), networks.tokens_sharding(),
                                          *(networks.batch_sharding(2),) * 5))


def compile_token_stats(networks: Networks, distribution: TokenDistribution):
    """``(params, frozen, observation, action) -> (log-probs, values)`` per action token, jitted
    (:func:`archer_jax.learners.ppo.token_stats`, under ``distribution``: the rollouts')."""
    replicated = shd.replicated(networks.mesh)
    stats = traced_with(functools.partial(token_stats, networks.actor_graphdef, distribution), networks.matmul_precision)
    return jax.jit(stats, out_shardings=(replicated, replicated))


def compile_turn_values(networks: Networks, ppo: PPOConfig):
    """``(critic_params, observation, action) ->`` the turn level of ``archer_hierarchical``:
    ``min Q(s, a)``, or ``min Q(s, a) - min V(s)`` with ``critic_baseline``, jitted."""
    fn = utterance_advantage if ppo.critic_baseline else utterance_q
    return jax.jit(traced_with(functools.partial(fn, networks.critic_graphdef), networks.matmul_precision),
                   out_shardings=shd.replicated(networks.mesh))


class PPO(Agent):
    """PPO's epochs over each rollout (after ArCHer's critic steps for ``archer_hierarchical``).

    With ``kl_coef > 0`` every actor state carries a copy of its initial parameters as ``target``:
    the reference policy of the KL penalty, checkpointed with it and never updated.
    """

    name = "ppo"
    Config = Config

    @classmethod
    def config_of(cls, run_config) -> Config:
        """PPO's ``Config`` from a run's config: GRPO's groups need two rollouts a game or more, and a
        separate value model needs the policy's weights to train."""
        config = super().config_of(run_config)
        k = run_config.rollout_group_size  # the loop's key: every agent's rollouts follow it
        if config.ppo.estimator.needs_groups and k < 2:
            raise ValueError(f"rollout_group_size: adv_estimator {config.ppo.adv_estimator!r} compares rollouts of "
                             f"one game, so it needs at least 2 per game (got {k}); e.g. --config.rollout_group_size=4")
        if config.ppo.value_head == "separate" and run_config.model.lora.rank:
            raise ValueError("ppo.value_head: 'separate' copies the policy's weights, which a LoRA policy "
                             f"(model.lora.rank {run_config.model.lora.rank}) keeps frozen; use shared or detached")
        return config

    @classmethod
    def actor_waits_for_warmup(cls, config: Config) -> bool:
        """``archer_hierarchical``'s PPO steps wait for its utterance critic's warm-up."""
        return config.ppo.estimator.needs_critic and config.actor_steps > 0

    @classmethod
    def networks_for(cls, config: Config) -> NetworkSpec:
        """The utterance critic for ``archer_hierarchical`` only; the actor's value head (or value
        model) for the estimators that read values."""
        values = config.ppo.estimator.needs_values
        return NetworkSpec(critic=config.ppo.estimator.needs_critic,
                           token_baseline=config.learner.loss.needs_baseline or values,
                           baseline_gradient=values and config.ppo.value_head == "shared",
                           value_model=values and config.ppo.value_head == "separate")

    def __init__(self, parts, config: Config):
        super().__init__(parts, config)
        networks, ppo = self.networks, config.ppo
        self.actor_target = ppo.kl_coef > 0
        self.ppo_step = compile_ppo_step(networks, self.actor_tx, ppo, config.learner.distribution)
        self._token_stats = compile_token_stats(networks, config.learner.distribution)
        if networks.has_critic:
            self.critic_step = archer.critic_step(networks, self.critic_tx, config.learner)
            self._turn_values = compile_turn_values(networks, ppo)

    init_critic = archer.init_critic  # archer_hierarchical's critic starts as ArCHer's

    def actor_optimizer(self, learning_rate: float):
        """With a separate value model (``value_head="separate"``), the value model trains at the
        critic's learning rate under its own gradient clipping, the policy at ``learning_rate``."""
        learner = self.config.learner
        if self.config.ppo.value_head != "separate":
            return super().actor_optimizer(learning_rate)
        return train_state.partitioned_optimizer(dict(policy=learning_rate, value=learner.critic_lr),
                                                 learner.max_grad_norm, lambda key: "value" if key == "baseline" else "policy")

    def token_stats(self, state: TrainState, observation: Tokens, action: Tokens, reference: bool = False):
        """Per-token ``(log-probs, values)`` of the actor in ``state`` on padded policy tokens, as
        NumPy arrays; ``reference``: the log-probs of its reference policy (``state.target``)."""
        params = state.target if reference else state.params
        logprobs, values = self._token_stats(params, state.frozen, observation, action)
        return jax.device_get(logprobs), jax.device_get(values)

    def turn_values(self, critic_params, observation: Tokens, action: Tokens):
        """The turn level of ``archer_hierarchical``: ``min Q(s, a)`` of the utterance critic, or
        ``min Q(s, a) - min V(s)`` with ``ppo.critic_baseline``, as NumPy."""
        return jax.device_get(self._turn_values(critic_params, observation, action))

    def rollout_targets(self, states: States, sample: dict, first_episode: int) -> PPOBatch:
        """This rollout's whole PPO batch: tokens, ``log π_old``, ``V_old`` (and ``log π_ref``), and the
        estimator's advantages and returns per action token."""
        parts, pipeline, config = self.parts, self.parts.pipeline, self.config.ppo
        tokens = pipeline.policy_batch(sample)
        obs, act = tokens.observation, tokens.action
        take = lambda t, i: Tokens(t.ids[i], t.mask[i])  # noqa: E731
        stats = lambda i, ref=False: self.token_stats(states.actor, trimmed(take(obs, i)), take(act, i), ref)  # noqa: E731
        logprobs, values = _in_chunks(stats, len(obs.ids), parts.batch)
        reference = np.zeros_like(logprobs)
        if config.kl_coef:
            reference, _ = _in_chunks(lambda i: stats(i, True), len(obs.ids), parts.batch)
        layout = pipeline.dialogue_rows(np.asarray(sample["episode"]), act.mask.sum(axis=1))
        turn_q = np.zeros(len(obs.ids), np.float32)
        if config.estimator.needs_critic:
            critic_obs = pipeline.critic_tokens(sample["critic_observation"])
            critic_act = pipeline.critic_tokens(sample["critic_action"], action=True)
            (turn_q,) = _in_chunks(lambda i: (self.turn_values(states.critic.params, take(critic_obs, i),
                                                               take(critic_act, i)),),
                                   len(obs.ids), parts.batch)
        group_of = (np.unique(sample["episode"]) - first_episode) // parts.config.rollout_group_size
        rows = ppo_estimators.TokenRows(
            rewards=layout.ends(np.asarray(sample["reward"], np.float32)), values=layout.to_rows(values),
            mask=layout.to_rows(act.mask.astype(np.float32)), turn_end=layout.ends(np.ones(len(obs.ids), np.float32)),
            turn_values=layout.ends(turn_q), group=group_of.astype(np.int32),
        )
        adv, ret = _estimate(config)(rows)
        width = act.ids.shape[1]
        return PPOBatch(obs, act, logprobs, values, layout.from_rows(adv, width), layout.from_rows(ret, width), reference)

    def programs(self, iterations: int) -> list[Program]:
        """PPO's step over each rollout's transitions (at most ``max_turns`` a dialogue) for
        ``epochs``, after the warm-up for ``archer_hierarchical``, whose critic steps come first."""
        c, ppo = self.parts.config, self.config.ppo
        hierarchical = ppo.estimator.needs_critic
        calls = ppo.epochs * math.ceil(c.rollout_size * c.env.max_turns / self.parts.batch)
        out = [Program("ppo_step", self.ppo_step,
                       lambda s, rows: (self.abstract_actor(),
                                        PPOBatch(s.tokens(rows, s.prompt), s.tokens(rows, s.action),
                                                 *(s.vector(rows, s.action),) * 5)),
                       after_warmup(calls, self.config.warmup_iter, iterations) if hierarchical else calls)]
        if self.networks.has_critic:
            out.insert(0, archer.critic_program(self))
        return out

    def pi_phase_rows(self, iterations: int) -> int:
        """``archer_hierarchical``'s critic phase: the a_π of all its critic steps, drawn together."""
        return self.config.critic_steps * self.parts.batch if self.config.ppo.estimator.needs_critic else 0

    def ppo_updates(self, states: States, replay: ReplayBuffer, iteration: int) -> States:
        """PPO's epochs over the newest rollout's transitions, in shuffled minibatches of ``parts.batch``."""
        parts, c = self.parts, self.parts.config
        positions = latest_positions(replay, c.rollout_size)
        sample = replay.gather(positions)
        batch = self.rollout_targets(states, sample, int(np.min(sample["episode"])))
        count, size = len(positions), parts.batch
        rng = np.random.default_rng([c.seed, iteration])
        actor = states.actor
        for _ in range(self.config.ppo.epochs):
            order = np.resize(rng.permutation(count), math.ceil(count / size) * size)  # the last minibatch wraps round
            for start in range(0, len(order), size):
                index = order[start : start + size]
                minibatch = jax.tree.map(lambda x: x[index], batch)
                minibatch = minibatch._replace(observation=trimmed(minibatch.observation))
                actor, metrics = self.ppo_step(actor, minibatch)
                parts.metrics.add("actor", metrics)
        return States(actor, states.critic)

    def learn(self, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
        """``archer_hierarchical``: the utterance critic's TD steps first, and PPO only after
        ``warmup_iter`` iterations (as ArCHer's actor); other estimators: PPO every iteration."""
        critic_s = actor_s = 0.0
        hierarchical = self.config.ppo.estimator.needs_critic
        if hierarchical:
            states, critic_s = timed(archer.critic_phase, self, states, replay, iteration)
        if not hierarchical or iteration > self.config.warmup_iter:
            states, actor_s = timed(self.ppo_updates, states, replay, iteration)
        return states, {"critic": critic_s, "actor": actor_s}
