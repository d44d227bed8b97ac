"""The agents' steps on networks alone, without a run's parts (models loaded from a config,
sampler, envs): for benchmarks, tests and plans that compile or time steps on modules they build.

    steps = Steps(actor, critic, LearnerConfig(critic_lr=1e-4), mesh=mesh)
    critic, metrics = steps.critic_step(steps.init_critic(), batch)   # a padded CriticBatch
    critic, metrics = steps.packed_critic_step(critic, packed)       # a PackedCriticBatch
    actor, metrics = steps.packed_actor_step(actor, critic.params, packed_actor)  # a PackedActorBatch
    compiled = steps.programs()["actor_step"].lower(*abstract_args).compile()

Each step is built by its agent's own builder (:func:`archer_jax.agents.archer.critic_step`,
:func:`~archer_jax.agents.archer.actor_step`, :func:`~archer_jax.agents.offline_archer.iql_critic_step`,
:func:`~archer_jax.agents.agent.bc_step`, :func:`~archer_jax.agents.ppo.compile_ppo_step`),
with the optimizers the agents use: the same programs a run compiles.
"""

from __future__ import annotations

import dataclasses

import jax

from archer_jax.agents import archer, offline_archer
from archer_jax.agents import ppo as ppo_agent
from archer_jax.agents.agent import bc_step, check_value_head
from archer_jax.learners import train_state
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.networks import Networks
from archer_jax.learners.offline_archer import IQLConfig


class Steps:
    """The steps the agents compile, on networks of ``actor`` and ``critic`` (None: the actor's
    only); ``ppo`` (a PPOConfig) adds PPO's, with its optimizer and reference policy as the PPO
    agent sets them. ``networks_kwargs`` go to :class:`Networks` (mesh, rules, precision, limit)."""

    def __init__(self, actor, critic, config: LearnerConfig = LearnerConfig(), iql: IQLConfig = IQLConfig(), *,
                 ppo=None, **networks_kwargs):
        self.networks = n = Networks(actor, critic, micro_batch_size=config.micro_batch_size, **networks_kwargs)
        self.ppo = ppo
        needs = config.loss.needs_baseline or (ppo is not None and ppo.estimator.needs_values)
        what = f"actor_loss {config.actor_loss!r}" + (f" with adv_estimator {ppo.adv_estimator!r}" if ppo else "")
        check_value_head(n, needs, what)
        with_target = ppo is not None and ppo.kl_coef > 0
        self.with_target = with_target
        if ppo is not None and ppo.value_head == "separate":
            self.actor_tx = train_state.partitioned_optimizer(dict(policy=config.actor_lr, value=config.critic_lr),
                                                              config.max_grad_norm,
                                                              lambda key: "value" if key == "baseline" else "policy")
        else:
            self.actor_tx = train_state.optimizer(config.actor_lr, config.max_grad_norm)
        self.critic_tx = train_state.optimizer(config.critic_lr, config.max_grad_norm)
        self.actor_graphdef, self.critic_graphdef = n.actor_graphdef, n.critic_graphdef
        self._actor_params, self._critic_params = n._actor_params, n._critic_params
        self._programs = {"bc_step": bc_step(n, self.actor_tx, with_target)}
        if critic is not None:
            padded, packed = (dataclasses.replace(config, pack_critic=p) for p in (False, True))
            self._programs.update(critic_step=archer.critic_step(n, self.critic_tx, padded),
                                  packed_critic_step=archer.critic_step(n, self.critic_tx, packed),
                                  iql_critic_step=offline_archer.iql_critic_step(n, self.critic_tx, config, iql),
                                  actor_step=archer.actor_step(n, self.actor_tx, self.critic_tx, config, iql,
                                                               with_target=with_target),
                                  packed_actor_step=archer.actor_step(n, self.actor_tx, self.critic_tx, config, iql,
                                                                      with_target=with_target, packed=True))
        if ppo is not None:
            self._programs["ppo_step"] = ppo_agent.compile_ppo_step(n, self.actor_tx, ppo, config.distribution)
            self._token_stats = ppo_agent.compile_token_stats(n, config.distribution)
            if critic is not None and ppo.estimator.needs_critic:
                self._turn_q = ppo_agent.compile_turn_values(n, dataclasses.replace(ppo, critic_baseline=False))
                self._turn_advantage = ppo_agent.compile_turn_values(n, dataclasses.replace(ppo, critic_baseline=True))

    def programs(self) -> dict:
        """The compiled steps by name (to call, ``.lower(...)``, or read their ``.layouts``)."""
        return dict(self._programs)

    def __getattr__(self, name):  # steps.critic_step, steps.bc_step, ...
        programs = self.__dict__.get("_programs", {})
        if name in programs:
            return programs[name]
        raise AttributeError(name)

    def init_actor(self, params=None):
        """A fresh actor state (from ``params``, else the module's)."""
        return self.networks.init_actor(self.actor_tx, self.with_target, params)

    def init_critic(self, params=None, target=None):
        """A fresh critic state (from ``params`` and ``target``, else the module's)."""
        return self.networks.init_critic(self.critic_tx, params, target)

    def policy_params(self, state):
        """The policy's parameters in an actor state (what the sampler acts with)."""
        return self.networks.policy_params(state)

    def token_stats(self, state, observation, action, reference: bool = False):
        """PPO's per-token ``(log-probs, values)`` as NumPy (``reference``: the reference policy's)."""
        params = state.target if reference else state.params
        logprobs, values = self._token_stats(params, state.frozen, observation, action)
        return jax.device_get(logprobs), jax.device_get(values)

    def utterance_q(self, critic_params, observation, action):
        """``min Q(s, a)`` of the critic, as NumPy."""
        return jax.device_get(self._turn_q(critic_params, observation, action))

    def utterance_advantage(self, critic_params, observation, action):
        """``min Q(s, a) - min V(s)`` of the critic, as NumPy."""
        return jax.device_get(self._turn_advantage(critic_params, observation, action))
