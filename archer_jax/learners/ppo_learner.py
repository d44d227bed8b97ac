"""The learner of PPO runs: the :class:`~archer_jax.learners.learner.Learner`'s steps, plus PPO's
jitted step, its rollout pass (per-token log-probs and values) and the utterance critic's Q.

    learner = PPOLearner(Actor(policy, token_baseline=True), None, LearnerConfig(), ppo=PPOConfig())
    logprobs, values = learner.token_stats(actor_state, observation, action)
    actor_state, metrics = learner.ppo_step(actor_state, PPOBatch(...))

With ``kl_coef > 0`` every actor state carries a copy of its initial parameters as ``target``:
the reference policy of the KL penalty, checkpointed with it and never updated.
"""

from __future__ import annotations

import jax
from flax import nnx

from archer_jax.learners import archer, train_state
from archer_jax.learners.learner import Learner, LearnerConfig
from archer_jax.learners.ppo import PPOBatch, PPOConfig, ppo_step, token_stats
from archer_jax.learners.train_state import TrainState
from archer_jax.models.tokenizer import Tokens
from archer_jax import sharding as shd


class PPOLearner(Learner):
    """A :class:`Learner` with PPO's step; ``ppo`` holds its hyperparameters."""

    def __init__(self, actor, critic, config: LearnerConfig = LearnerConfig(), *, ppo: PPOConfig, **kwargs):
        self.ppo = ppo
        self.actor_target = ppo.kl_coef > 0
        super().__init__(actor, critic, config, **kwargs)
        tokens = Tokens(self.batch_sharding(2), self.batch_sharding(2))
        values = self.batch_sharding(2)
        replicated = shd.replicated(self.mesh)
        self._ppo_step = self.step_program(self._traced(ppo_step, self.actor_graphdef, self.actor_tx, ppo),
                                           self.actor_shardings, PPOBatch(tokens, tokens, values, values, values, values, values))
        self._token_stats = jax.jit(self._traced(token_stats, self.actor_graphdef, ppo.temperature),
                                    out_shardings=(replicated, replicated))
        if critic is not None:
            self._utterance_q = jax.jit(self._traced(archer.utterance_q, self.critic_graphdef), out_shardings=replicated)
            self._utterance_advantage = jax.jit(self._traced(archer.utterance_advantage, self.critic_graphdef),
                                                out_shardings=replicated)

    def _value_head(self, config: LearnerConfig) -> tuple[bool, str]:
        needs, what = super()._value_head(config)
        return needs or self.ppo.estimator.needs_values, f"{what} with adv_estimator {self.ppo.adv_estimator!r}"

    def _actor_optimizer(self, config: LearnerConfig):
        """With a separate value model (``value_head="separate"``), the value model trains at the
        critic's learning rate under its own gradient clipping, the policy at the actor's."""
        if self.ppo.value_head != "separate":
            return super()._actor_optimizer(config)
        return train_state.partitioned_optimizer(dict(policy=config.actor_lr, value=config.critic_lr),
                                                 config.max_grad_norm, lambda key: "value" if key == "baseline" else "policy")

    def programs(self) -> dict:
        return {**super().programs(), "ppo_step": self._ppo_step}

    def ppo_step(self, state: TrainState, batch: PPOBatch) -> tuple[TrainState, dict]:
        """One PPO optimizer step on a minibatch (:func:`archer_jax.learners.ppo.ppo_step`)."""
        self._check(batch, critic=False)
        return self._ppo_step(state, batch)

    def token_stats(self, state: TrainState, observation: Tokens, action: Tokens, reference: bool = False):
        """Per-token ``(log-probs, values)`` of the actor in ``state`` on padded policy tokens, as
        NumPy arrays; ``reference``: the log-probs of its reference policy (``state.target``)."""
        params = state.target if reference else state.params
        logprobs, values = self._token_stats(params, state.frozen, observation, action)
        return jax.device_get(logprobs), jax.device_get(values)

    def utterance_q(self, critic_params: nnx.State, observation: Tokens, action: Tokens):
        """``min(Q1, Q2)(s, a)`` of the critic with ``critic_params`` on critic tokens, as NumPy."""
        self._check()
        return jax.device_get(self._utterance_q(critic_params, observation, action))

    def utterance_advantage(self, critic_params: nnx.State, observation: Tokens, action: Tokens):
        """``min(Q1, Q2)(s, a) - min(V1, V2)(s)`` of the critic with ``critic_params``, as NumPy."""
        self._check()
        return jax.device_get(self._utterance_advantage(critic_params, observation, action))
