r"""PPO's advantage estimators by name (``config.ppo.adv_estimator``), as pure functions of token arrays.

Every estimator sees a batch of token rows, ``[batch, tokens]``: one row per dialogue (its
utterances' tokens one after the other) or per utterance, with ``mask`` 1 at the policy's tokens
and 0 at padding. It returns ``(advantages, returns)``, both ``[batch, tokens]``: the policy loss
weighs each token's log-ratio by its advantage, and the value head regresses to the returns.

* :func:`gae`: token-level GAE(γ, λ) over the masked tokens (a dialogue's turns chained, the next
  value read at the next policy token), whitened over the mask: verl's GAE for multi-turn rows.
* :func:`grpo`: a trajectory's return, standardised within its group of rollouts of one game.
* :func:`archer_ragen`: RAGEN's ``compute_archer_advantage_return``, reproduced exactly.
* :func:`archer_hierarchical`: the paper's hierarchy inside PPO: an utterance's return is the
  TD-learned utterance critic's ``Q(s, a)``, and each token's baseline depends on its prefix only.

The NumPy re-derivations of the published loops are in ``tests/learners/test_ppo_estimators.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array
WHITEN_EPS = 1e-8  # verl's masked_whiten
GRPO_EPS = 1e-6  # verl's compute_grpo_outcome_advantage


def masked_whiten(values: Array, mask: Array) -> Array:
    """verl's ``masked_whiten``: ``(x - mean) / sqrt(var + 1e-8)`` with the mean and the
    Bessel-corrected variance over the masked entries of the whole batch. Every entry is
    transformed, padding included (losses mask it)."""
    mask = mask.astype(jnp.float32)
    count = jnp.sum(mask)
    mean = jnp.sum(values * mask) / count
    variance = jnp.sum((values - mean) ** 2 * mask) / count * count / (count - 1.0)
    return (values - mean) * jax.lax.rsqrt(variance + WHITEN_EPS)


def _masked_gae(rewards: Array, values: Array, mask: Array, gamma: float, lam: float,
                reset: Array | None = None) -> tuple[Array, Array]:
    """GAE run backwards over each row's masked positions only: position ``t``'s next value is the
    value at the next masked position (0 after the last). At a ``reset`` position the recursion
    restarts (next value and running advantage 0), as at the row's end: an utterance's last token.
    Unmasked positions get advantage and return 0 and leave the recursion untouched."""
    mask = mask.astype(bool)
    reset = jnp.zeros_like(mask) if reset is None else reset.astype(bool)

    def back(carry, column):
        next_value, last = carry
        r, v, m, cut = column
        next_value = jnp.where(cut, 0.0, next_value)
        last = jnp.where(cut, 0.0, last)
        delta = r + gamma * next_value - v
        gae_t = delta + gamma * lam * last
        carry = (jnp.where(m, v, next_value), jnp.where(m, gae_t, last))
        return carry, (jnp.where(m, gae_t, 0.0), jnp.where(m, gae_t + v, 0.0))

    batch = rewards.shape[0]
    init = (jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.float32))
    columns = tuple(jnp.swapaxes(x, 0, 1) for x in (rewards.astype(jnp.float32), values.astype(jnp.float32), mask, reset))
    _, (adv, ret) = jax.lax.scan(back, init, columns, reverse=True)
    return jnp.swapaxes(adv, 0, 1), jnp.swapaxes(ret, 0, 1)


def gae(rewards: Array, values: Array, mask: Array, *, gamma: float = 1.0, lam: float = 0.95,
        whiten: bool = True) -> tuple[Array, Array]:
    """Token-level GAE over the masked tokens: ``δ_t = r_t + γ V_next - V_t``,
    ``A_t = δ_t + γλ A_next``, ``R_t = A_t + V_t``, where "next" is the row's next masked token
    (0 after the last); the advantages are then whitened over the mask (the returns are not)."""
    adv, ret = _masked_gae(rewards, values, mask, gamma, lam)
    return (masked_whiten(adv, mask) if whiten else adv), ret


def grpo(rewards: Array, mask: Array, group: Array) -> tuple[Array, Array]:
    """GRPO's outcome advantage (verl's ``compute_grpo_outcome_advantage``): each row's score is
    the sum of its rewards, standardised within its ``group`` (``[batch]`` ints: rollouts of one
    game) by the group's mean and unbiased standard deviation (``+ 1e-6``); a group of one row
    keeps its score (mean 0, std 1). Every masked token of the row gets the row's advantage, which
    is also the return (there is no value function)."""
    scores = jnp.sum(rewards.astype(jnp.float32), axis=-1)
    batch = scores.shape[0]
    count = jax.ops.segment_sum(jnp.ones_like(scores), group, num_segments=batch)
    mean = jax.ops.segment_sum(scores, group, num_segments=batch) / jnp.maximum(count, 1.0)
    squares = jax.ops.segment_sum((scores - mean[group]) ** 2, group, num_segments=batch)
    std = jnp.sqrt(squares / jnp.maximum(count - 1.0, 1.0))
    single = count[group] < 2
    adv = (scores - jnp.where(single, 0.0, mean[group])) / (jnp.where(single, 1.0, std[group]) + GRPO_EPS)
    adv = adv[:, None] * mask.astype(jnp.float32)
    return adv, adv


def archer_ragen(rewards: Array, values: Array, mask: Array, *, gamma: float = 1.0, lam: float = 1.0,
                 high_level_gamma: float = 0.95, alpha: float = 0.1) -> tuple[Array, Array]:
    """RAGEN's ``compute_archer_advantage_return``, step for step.

    1. The turn ends are the tokens whose reward is non-zero (RAGEN's ``reward_mask``: a turn
       whose reward is exactly 0 is not one). Backwards over them, with ``H`` starting at 0:
       ``δ_k = r_k + γ_H H_{k+1} - 0``, ``g_k = δ_k + γ_H λ g_{k+1}``, ``H_k = g_k``; so
       ``H_k = r_k + γ_H (1 + λ) H_{k+1}``: the realized return of the sampled continuation
       (doubled per step at λ = 1), not a learned critic. ``H`` is 0 at every other token.
    2. ``V_mix = α H + (1 - α) V``: at a turn end the baseline depends on the sampled outcome.
    3. Token-level GAE(γ, λ) on ``V_mix`` over the masked tokens (turns chained, no reset),
       ``R_t = A_t + V_mix,t``; the advantages are whitened over the mask.
    """
    rewards = rewards.astype(jnp.float32)
    ends = rewards != 0

    def back(carry, column):
        next_high, last = carry
        r, end = column
        g = r + high_level_gamma * next_high + high_level_gamma * lam * last
        return (jnp.where(end, g, next_high), jnp.where(end, g, last)), jnp.where(end, g, 0.0)

    batch = rewards.shape[0]
    init = (jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.float32))
    _, high = jax.lax.scan(back, init, (jnp.swapaxes(rewards, 0, 1), jnp.swapaxes(ends, 0, 1)), reverse=True)
    mixed = alpha * jnp.swapaxes(high, 0, 1) + (1.0 - alpha) * values.astype(jnp.float32)
    adv, ret = _masked_gae(rewards, mixed, mask, gamma, lam)
    return masked_whiten(adv, mask), ret


def archer_hierarchical(turn_values: Array, values: Array, mask: Array, turn_end: Array, *, lam: float = 1.0,
                        whiten: bool = True) -> tuple[Array, Array]:
    r"""The paper's hierarchy as a PPO advantage: the high level is ArCHer's utterance critic,
    trained off-policy by TD (``agents/ppo.py`` runs its critic steps), the low level token GAE.

    ``turn_values`` holds, at each utterance's last token (``turn_end``), ``Q(s, a)`` of the
    critic for the utterance ``a`` sampled in state ``s``; ``values`` are the token value head's
    ``b_t = b(s, a_{<t})``. Within each utterance (the recursion restarts at every turn end; γ = 1
    inside an utterance, the turn discount lives in Q's TD targets):

        δ_t = b_{t+1} - b_t   (δ_last = Q(s, a) - b_last),   A_t = δ_t + λ A_{t+1},   R_t = A_t + b_t

    At λ = 1 this telescopes to ``A_t = Q(s, a) - b(s, a_{<t})``: ArCHer's token-level actor with
    a baseline. The baseline of token ``a_t`` is a function of ``(s, a_{<t})`` alone, so
    ``E_{a_t ~ π(·|s, a_<t)}[∇ log π(a_t | s, a_<t) b(s, a_<t)] = b(s, a_<t) ∇ Σ_{a_t} π(a_t | ·) = 0``:
    the estimator's expected gradient is ``E[Σ_t ∇ log π(a_t | s, a_<t) Q(s, a)] = ∇_π E_{a~π}[Q(s, a)]``,
    the utterance-level policy gradient of the high-level critic, whatever ``b`` is. (RAGEN's
    mixed baseline puts the realized return of the sampled outcome into the baseline of the turn's
    last token, which breaks this.) At λ < 1 the TD errors use ``b_{t+1}``, which depends on
    ``a_t``: lower variance, biased unless ``b`` is exact (GAE's usual trade). The value head
    regresses to ``R_t``, at λ = 1 ``Q(s, a)`` itself.

    With ``PPOConfig.critic_baseline`` the caller passes ``Q(s, a) - V(s)`` (the critic's own
    state value) as ``turn_values``: the baseline is then ``V(s) + b(s, a_<t)``, still a function
    of the prefix alone, and the head learns only ``Q - V``. A head regressed to ``Q`` itself lags
    while the critic's level moves (in 20Q it falls from 0 towards the returns over the first tens
    of iterations), and every sampled token then gets the same large negative advantage.
    """
    adv, ret = _masked_gae(turn_values * turn_end, values, mask, 1.0, lam, reset=turn_end)
    return (masked_whiten(adv, mask) if whiten else adv), ret


class TokenRows(NamedTuple):
    """What the estimators read, ``[rows, tokens]`` unless said: each row a dialogue's utterances
    one after the other (:mod:`archer_jax.agents.ppo` lays them out)."""

    rewards: Array  # each turn's reward at its utterance's last token
    values: Array  # the token value head's V_t (zeros without one)
    mask: Array  # 1 at the policy's tokens
    turn_end: Array  # 1 at each utterance's last token
    turn_values: Array  # min Q(s, a) of the utterance critic at each utterance's last token (archer_hierarchical)
    group: Array  # [rows] the game of each row (grpo's groups)


@dataclasses.dataclass(frozen=True)
class Estimator:
    """A registered estimator: ``fn(rows: TokenRows, config) -> (advantages, returns)``, ``config``
    a :class:`~archer_jax.learners.ppo.PPOConfig`. ``needs_values``: the token value head;
    ``needs_critic``: the utterance critic (``archer_hierarchical``); ``needs_groups``: several
    rollouts per game (``grpo``)."""

    name: str
    fn: Callable[[TokenRows, object], tuple[Array, Array]]
    needs_values: bool = True
    needs_critic: bool = False
    needs_groups: bool = False


ESTIMATORS: dict[str, Estimator] = {}


def register(estimator: Estimator) -> Estimator:
    """Makes ``config.ppo.adv_estimator = estimator.name`` select ``estimator``."""
    if estimator.name in ESTIMATORS:
        raise ValueError(f"advantage estimator {estimator.name!r} is already registered")
    ESTIMATORS[estimator.name] = estimator
    return estimator


def get(name: str) -> Estimator:
    """The estimator ``name``; a KeyError lists the registered ones."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise KeyError(f"unknown advantage estimator {name!r}; registered: {', '.join(ESTIMATORS)}") from None


register(Estimator("gae", lambda r, c: gae(r.rewards, r.values, r.mask, gamma=c.gamma, lam=c.lam, whiten=c.whiten)))
register(Estimator("grpo", lambda r, c: grpo(r.rewards, r.mask, r.group), needs_values=False, needs_groups=True))
register(Estimator("archer_ragen", lambda r, c: archer_ragen(
    r.rewards, r.values, r.mask, gamma=c.gamma, lam=c.lam, high_level_gamma=c.high_level_gamma, alpha=c.archer_alpha)))
register(Estimator("archer_hierarchical", lambda r, c: archer_hierarchical(
    r.turn_values, r.values, r.mask, r.turn_end, lam=c.lam, whiten=c.whiten), needs_critic=True))
