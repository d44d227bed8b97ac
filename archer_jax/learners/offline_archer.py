"""Offline ArCHer's critic update (OfflineArcher; IQL, Kostrikov et al. 2022), as a pure function.

    critic:  y_i = r + γ (1 - terminal) V̄_i(s')                     TD target from the target critic
             L = Σ_i MSE(Q_i(s, a), y_i) + Σ_i expectile_τ(q̄ - V_i(s))   a = the dataset's action
             q̄ = min_i Q̄_i(s, a)   (v_target="min", IQL's)   or   Q̄_i(s, a) for V_i ("paired", OfflineArcher's)
             θ ← Adam(∇L);  θ̄ ← (1 - τ_polyak) θ̄ + τ_polyak θ
    actor:   the online actor step (:func:`archer_jax.learners.archer.actor_step`) on the dataset's
             actions with the registered ``awr`` loss: -mean(min(exp(β A), clip) · Σ_t log π(a_t|s, a_<t)),
             A = min_i Q_i(s, a) - min_i V_i(s) of the online critic.

No policy sample enters either update: V is an upper expectile (τ = 0.9) of Q over the behaviour
data, so the critic never queries actions the data lacks; τ = 0.5 makes V the behaviour policy's
mean (the paper's SARSA variant). Batches are :class:`~archer_jax.learners.batches.CriticBatch`
whose ``pi_action`` is unused (the learner passes the dataset's action there too).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from archer_jax.learners import losses
from archer_jax.learners.archer import critic_update, embed_both, td_targets
from archer_jax.learners.batches import CriticBatch
from archer_jax.learners.train_state import TrainState
from archer_jax.runtime.config_keys import key

Array = jax.Array

V_TARGETS = ("min", "paired")


@dataclasses.dataclass(frozen=True)
class IQLConfig:
    """Offline ArCHer's keys of ``config.learner`` (OfflineArcher's values): V's expectile (0.5 =
    the SARSA variant), V's target (min: min of the target Qs, IQL's; paired: each V_i its own
    Q̄_i, OfflineArcher's code), and the AWR actor's β (OfflineArcher's inv_temp) and weight clip."""

    expectile: float = key(
        0.9, "offline ArCHer: V's expectile of Q over the data, in (0, 1) (0.9 IQL; 0.5 the SARSA variant)",
        official="OfflineArcher `critic_expectile`")
    iql_v_target: str = key(
        "min", "offline ArCHer: V's target: min (min of the target Qs) | paired (each V_i its own target Q_i)",
        official="— (OfflineArcher: `paired`)")
    awr_beta: float = key(
        1.0, "offline ArCHer's AWR actor: weights exp(awr_beta * A)", official="OfflineArcher `inv_temp`")
    awr_clip: float = key(100.0, "offline ArCHer's AWR actor: the weights' upper clip (> 0)")

    def __post_init__(self):
        if not 0 < self.expectile < 1:
            raise ValueError(f"expectile: must be in (0, 1), got {self.expectile}")
        if self.iql_v_target not in V_TARGETS:
            raise ValueError(f"iql_v_target: unknown value {self.iql_v_target!r}; known: {', '.join(V_TARGETS)}")
        if not (math.isfinite(self.awr_clip) and self.awr_clip > 0):
            raise ValueError(f"awr_clip: must be finite and > 0, got {self.awr_clip}")
        if not math.isfinite(self.awr_beta) or self.awr_beta < 0:
            raise ValueError(f"awr_beta: must be finite and >= 0, got {self.awr_beta}")


def iql_v_targets(q1: Array, q2: Array, v_target: str) -> tuple[Array, Array]:
    """Each V head's regression target from the target critic's ``Q̄_1, Q̄_2`` of the dataset action:
    both ``min(Q̄_1, Q̄_2)`` ("min") or each its own ``Q̄_i`` ("paired")."""
    if v_target == "min":
        low = jnp.minimum(q1, q2)
        return low, low
    if v_target == "paired":
        return q1, q2
    raise ValueError(f"v_target must be one of {V_TARGETS}, got {v_target!r}")


def iql_critic_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    gamma: float,
    tau: float,
    expectile: float,
    v_target: str,
    state: TrainState,
    batch: CriticBatch,
    *,
    micro_batches: int = 1,
) -> tuple[TrainState, dict[str, Array]]:
    """One IQL critic step on dataset transitions (see the module docstring), over
    ``micro_batches`` scanned micro-batches."""
    target = nnx.merge(graphdef, state.target)

    def loss_fn(params: nnx.State, b: CriticBatch):
        online = nnx.merge(graphdef, params)(b.observation, b.action)  # Q_i(s, a), V_i(s)
        e_s, e_next = embed_both(target, b.observation, b.next_observation)  # ē(s), ē(s'): one encoder pass
        q_targets = td_targets(b.reward, b.terminal, *target.v_values(e_next), gamma)  # r + γ(1-done) V̄_i(s')
        v_targets = iql_v_targets(*target.q_values(e_s, target.embed(b.action)), v_target)  # Q̄(s, a_data)
        return losses.iql_critic_loss(online, q_targets, v_targets, expectile)

    return critic_update(tx, tau, state, batch, loss_fn, micro_batches)
