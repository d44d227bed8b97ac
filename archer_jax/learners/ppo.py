r"""Token-level PPO (Schulman et al. 2017) for multi-turn dialogues: its losses and its step, as pure functions.

    ratio_t = π(a_t | s, a_<t) / π_old(a_t | s, a_<t)
    L_pg = token-mean(max(-A_t ratio_t, -A_t clip(ratio_t, 1 - ε, 1 + ε)))
    L_v  = token-mean(½ max((V_t - R_t)², (V_old,t + clip(V_t - V_old,t, ±ε_v) - R_t)²))
    L_kl = token-mean(exp(log π_ref - log π) - (log π_ref - log π) - 1)      ("k3", ≥ 0, to the reference)
    L = L_pg + c_v L_v + β_kl L_kl

``A_t`` and ``R_t`` come from an estimator of :mod:`archer_jax.learners.ppo_estimators`; ``π_old``
and ``V_old`` from one pass over the iteration's rollouts before its first PPO step; ``π_ref`` is
the policy the run started RL from (after SFT), held as the actor state's ``target``. Every π is
the policy's distribution that the rollouts were sampled from (temperature, top-k, top-p:
``LearnerConfig.distribution``), not its untempered logits. Token means
run over the step's action tokens, whatever its micro-batch layout. The loop around the step
(rollout, estimator, epochs of minibatches) is :mod:`archer_jax.agents.ppo`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from archer_jax.learners import ppo_estimators
from archer_jax.learners.optimization import accumulate_gradients, adam_update, keep_if_finite, summarize
from archer_jax.learners.train_state import TrainState, merged
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.models.tokenizer import Tokens
from archer_jax.runtime.config_keys import key

Array = jax.Array
VALUE_HEADS = ("separate", "shared", "detached")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO's hyperparameters (``config.ppo``): the estimator and its discounts, the clip ranges,
    the loss weights, the epochs over each iteration's rollouts, and where the values come from:
    ``separate`` (a value model of its own, a copy of the policy's initial weights with a value
    head, trained at ``critic_lr``: the critic model of verl and RAGEN), ``shared`` (a head on the
    policy's last hidden state, its gradient flowing into the policy: the single-network
    actor-critic) or ``detached`` (that head with its gradient stopped: a value probe that leaves
    the policy to the policy loss, as ArCHer's token baseline)."""

    adv_estimator: str = key(
        "gae", "PPO's advantage estimator: gae | grpo | archer_ragen | archer_hierarchical "
        "(archer_jax.learners.ppo_estimators)")
    epochs: int = key(4, "PPO: passes over each iteration's rollouts (minibatches of batch_size x grad_accum_steps)")
    clip: float = key(0.2, "PPO: the policy ratio's clip range epsilon, in (0, 1)")
    value_clip: float = key(0.2, "PPO: the value loss's clip range around the rollout's values (> 0)")
    vf_coef: float = key(0.5, "PPO: the value loss's weight")
    kl_coef: float = key(0.0, "PPO: the weight of the KL penalty to the policy RL started from (0 = off)")
    gamma: float = key(1.0, "PPO: discount per token of gae and archer_ragen, in [0, 1]")
    # Per token: with a flat value model, lam < 1 gives a long utterance's tokens a higher advantage
    # than a short one's (the turn's -1 reaches them discounted by more tokens); 1.0 does not.
    lam: float = key(0.95, "PPO: GAE's lambda, in [0, 1] (every estimator with a value head)")
    high_level_gamma: float = key(0.95, "PPO archer_ragen: RAGEN's turn-level discount, in [0, 1]")
    archer_alpha: float = key(
        0.1, "PPO archer_ragen: RAGEN's weight of the turn-level values in the mixed baseline, in [0, 1]")
    whiten: bool = key(
        True, "PPO: whiten the advantages over the batch's tokens (gae, archer_hierarchical; archer_ragen always does)")
    value_head: str = key(
        "separate", "PPO: separate (a value model of its own, at critic_lr) | shared (a head whose loss trains the "
        "policy's layers too) | detached (a head on stopped hidden states)")
    critic_baseline: bool = key(
        False, "PPO archer_hierarchical: the turn level is the critic's Q(s, a) - V(s), the token value head learns "
        "the rest (a baseline that starts at the critic's level)")

    def __post_init__(self):
        """Raises ValueError naming the key (``config.ppo.<key>`` in a run's config)."""
        if self.adv_estimator not in ppo_estimators.ESTIMATORS:
            raise ValueError(f"adv_estimator: unknown value {self.adv_estimator!r}; known: {', '.join(ppo_estimators.ESTIMATORS)}")
        if self.value_head not in VALUE_HEADS:
            raise ValueError(f"value_head: unknown value {self.value_head!r}; known: {', '.join(VALUE_HEADS)}")
        if self.epochs < 1:
            raise ValueError(f"epochs: must be >= 1, got {self.epochs}")
        if not 0 < self.clip < 1:
            raise ValueError(f"clip: must be in (0, 1), got {self.clip}")
        if not (math.isfinite(self.value_clip) and self.value_clip > 0):
            raise ValueError(f"value_clip: must be finite and > 0, got {self.value_clip}")
        for name in ("vf_coef", "kl_coef"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name}: must be finite and >= 0, got {getattr(self, name)}")
        for name in ("gamma", "lam", "high_level_gamma", "archer_alpha"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        if self.critic_baseline and not ppo_estimators.get(self.adv_estimator).needs_critic:
            raise ValueError(f"critic_baseline: only archer_hierarchical reads the utterance critic, "
                             f"not adv_estimator {self.adv_estimator!r}")

    @property
    def estimator(self) -> ppo_estimators.Estimator:
        return ppo_estimators.get(self.adv_estimator)


class PPOBatch(NamedTuple):
    """One PPO minibatch: the sampled transitions (policy tokens) and what the rollout pass and the
    estimator computed per action token (``[batch, action_len]``, 0 at padding)."""

    observation: Tokens  # left-padded
    action: Tokens  # right-padded, stop token included
    old_logprobs: Array
    old_values: Array
    advantages: Array
    returns: Array
    ref_logprobs: Array  # the reference policy's (zeros when kl_coef = 0)


def token_mean(x: Array, mask: Array, token_count: Array | float | None = None) -> Array:
    """``Σ x·mask / token_count`` (default: the tokens in ``mask``)."""
    count = jnp.maximum(jnp.sum(mask), 1.0) if token_count is None else token_count
    return jnp.sum(x * mask) / count


def policy_loss(logprobs: Array, old_logprobs: Array, adv: Array, mask: Array, clip: float,
                token_count: Array | float | None = None) -> tuple[Array, dict[str, Array]]:
    """PPO's clipped surrogate, a token mean; with the clipped fraction and ``E[log π_old - log π]``."""
    log_ratio = logprobs - old_logprobs
    ratio = jnp.exp(log_ratio)
    unclipped, clipped = -adv * ratio, -adv * jnp.clip(ratio, 1.0 - clip, 1.0 + clip)
    loss = token_mean(jnp.maximum(unclipped, clipped), mask, token_count)
    return loss, dict(clip_fraction=token_mean((clipped > unclipped).astype(jnp.float32), mask, token_count),
                      approx_kl=token_mean(-log_ratio, mask, token_count))


def value_loss(values: Array, old_values: Array, returns: Array, mask: Array, clip: float,
               token_count: Array | float | None = None) -> Array:
    """PPO's clipped value loss ``½ max((V - R)², (V_old + clip(V - V_old, ±clip) - R)²)``, a token mean."""
    clipped = old_values + jnp.clip(values - old_values, -clip, clip)
    return 0.5 * token_mean(jnp.maximum((values - returns) ** 2, (clipped - returns) ** 2), mask, token_count)


def kl_penalty(logprobs: Array, ref_logprobs: Array, mask: Array, token_count: Array | float | None = None) -> Array:
    """The "k3" estimate of KL(π ‖ π_ref) on π's samples, ``exp(d) - d - 1`` with
    ``d = log π_ref - log π`` (unbiased, never negative), a token mean."""
    d = ref_logprobs - logprobs
    return token_mean(jnp.exp(d) - d - 1.0, mask, token_count)


def ppo_loss(logprobs: Array, values: Array | None, batch: PPOBatch, mask: Array, config: PPOConfig,
             token_count: Array | float | None = None) -> tuple[Array, dict[str, Array]]:
    """``L_pg + vf_coef L_v + kl_coef L_kl`` (no value term without a value head, no KL term at 0)."""
    pg, aux = policy_loss(logprobs, batch.old_logprobs, batch.advantages, mask, config.clip, token_count)
    loss = pg
    aux.update(policy_loss=pg)
    if values is not None:
        vf = value_loss(values, batch.old_values, batch.returns, mask, config.value_clip, token_count)
        loss = loss + config.vf_coef * vf
        aux.update(value_loss=vf)
    if config.kl_coef:
        kl = kl_penalty(logprobs, batch.ref_logprobs, mask, token_count)
        loss = loss + config.kl_coef * kl
        aux.update(kl_to_reference=kl)
    return loss, aux


def ppo_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, config: PPOConfig,
             distribution: TokenDistribution, state: TrainState, batch: PPOBatch, *,
             micro_batches: int = 1) -> tuple[TrainState, dict[str, Array]]:
    """One PPO optimizer step on a minibatch, over ``micro_batches`` scanned micro-batches, its
    log-probs under ``distribution`` (the rollouts' sampling distribution). The actor state's
    ``target`` (the reference policy, if any) is carried unchanged."""
    token_count = jnp.maximum(jnp.sum(batch.action.mask).astype(jnp.float32), 1.0) / micro_batches

    def loss_fn(params: nnx.State, b: PPOBatch):
        logprobs, values = merged(graphdef, params, state.frozen, state.step)(b.observation, b.action, distribution)
        mask = b.action.mask.astype(jnp.float32)
        return ppo_loss(logprobs, values, b, mask, config, token_count)

    grads, loss, aux = accumulate_gradients(loss_fn, state.params, batch, micro_batches)
    params, opt_state = adam_update(state, tx, grads)
    state, metrics = keep_if_finite(state, state._replace(params=params, opt_state=opt_state, step=state.step + 1),
                                    loss, grads)
    metrics.update(loss=loss)
    metrics.update({k: jnp.mean(v) for k, v in aux.items()})
    metrics.update(summarize("advantage", batch.advantages, batch.action.mask))  # the policy's tokens only
    return state, metrics


def token_stats(graphdef: nnx.GraphDef, distribution: TokenDistribution, params: nnx.State,
                frozen: nnx.State | None, observation: Tokens, action: Tokens) -> tuple[Array, Array]:
    """Per-token log-probs (under ``distribution``) and values (zeros without a value head) of the
    actor with ``params``: the rollout pass before an iteration's first PPO step (and the
    reference's log-probs)."""
    logprobs, values = merged(graphdef, params, frozen)(observation, action, distribution)
    return logprobs, jnp.zeros_like(logprobs) if values is None else values
