"""The learner's hyperparameters every algorithm shares (``config.learner``): discount, Polyak
rate, learning rates, gradient clipping, the actor loss and the micro-batch size.

    learner = LearnerConfig(critic_lr=1e-5)
    learner.loss.needs_baseline  # the actor loss's registry entry

Defaults are the official online ArCHer's (``docs/algorithms.md``). Offline ArCHer's keys of the
same group (expectile, V's target, AWR's β and clip) are its own
:class:`~archer_jax.learners.offline_archer.IQLConfig`.
"""

from __future__ import annotations

import dataclasses
import math

from archer_jax.learners import actor_losses
from archer_jax.learners.micro_batching import AUTO, parse_micro_batch_size
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.runtime.config_keys import key


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """``config.learner``'s shared keys; ``__post_init__`` raises ValueError naming the key."""

    gamma: float = key(0.95, "discount per turn, in [0, 1]", official="`gamma`")
    tau: float = key(
        0.1, "Polyak rate of the target critic, in (0, 1] (0 would never move the target)", official="`tau`")
    critic_lr: float = key(2e-5, "Adam learning rate of the critic", official="`critic_lr`")
    actor_lr: float = key(1e-6, "Adam learning rate of the policy", official="`lm_lr`")
    # 0 or less is refused rather than taken as "off" (in PyTorch a 0 norm would zero every
    # gradient, not skip clipping); a huge value such as 1e9 never clips.
    max_grad_norm: float = key(
        1.0, "clip each network's gradient to this global norm (> 0; always on)",
        official="`max_grad_norm` (one clip over both networks)")
    actor_loss: str = key("actor_pg", "the policy-gradient loss: a name in archer_jax.learners.actor_losses")
    # "auto" reads the compiled step's memory analysis (on CPUs at most batch_size, faster there);
    # 8 is the official layout. Only memory and speed depend on it, not the update.
    micro_batch_size: int | str = key(
        AUTO, "transitions per scanned micro-batch: auto (largest that fits) or a number that cuts each step evenly",
        official="— (the official code's is `batch_size`)")
    # Packed rows hold whole groups of transitions: one group per device of the batch axes, or, with
    # a fixed micro_batch_size, per device and micro-batch (learners.packed_batches.group_count).
    pack_critic: bool = key(
        True, "the TD critic steps (ArCHer, CHAI, PPO's archer_hierarchical): pack each step's sequences several to a "
        "row, at their real lengths (false: pad each to the batch's longest)",
        official="— (the official code pads)")
    pack_actor: bool = key(
        True, "online ArCHer's actor steps: pack each step's policy s + a_π and critic s, a_π several to a row, at "
        "their real lengths (false: pad each to the batch's longest)",
        official="— (the official code pads)")
    # A baseline for what the critic's Q and V have in common, e.g. the V head's lag behind the
    # target Q it learns from.
    center_advantage: bool = key(
        False, "ArCHer's actor: each advantage less the step batch's mean (off: Q - V as it is)",
        official="— (Q − V as it is)")
    score_stop_token: bool = key(
        True, "ArCHer's actor: score the stop token ending a_π (false: without it, as the official code)",
        official="— (the official code cuts `\"\\n\"` before scoring)")
    # Not a key: the distribution the actor's actions were sampled from (config.sampling's
    # temperature, top-k, top-p, set by the agents whose actor scores its own samples), under which
    # every policy-gradient learner takes its log-probs. The model's own by default.
    distribution: TokenDistribution = TokenDistribution()

    def __post_init__(self):
        try:
            parse_micro_batch_size(self.micro_batch_size)
        except ValueError:
            raise ValueError(f"micro_batch_size: must be 'auto' or a positive integer, got {self.micro_batch_size!r}") from None
        if self.actor_loss not in actor_losses.ACTOR_LOSSES:
            raise ValueError(f"actor_loss: unknown value {self.actor_loss!r}; known: {', '.join(actor_losses.ACTOR_LOSSES)}")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma: must be in [0, 1], got {self.gamma}")
        if not 0 < self.tau <= 1:  # tau = 0: the target critic would never move
            raise ValueError(f"tau: must be in (0, 1], got {self.tau}")
        for name in ("critic_lr", "actor_lr"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be > 0, got {value}")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):  # clipping is always on
            raise ValueError(f"max_grad_norm: must be finite and > 0 (clipping cannot be turned off; "
                             f"a huge value such as 1e9 never clips), got {self.max_grad_norm}")

    @property
    def loss(self) -> actor_losses.ActorLoss:
        """The actor loss's registry entry."""
        return actor_losses.get_actor_loss(self.actor_loss)


def loss_options(learner: LearnerConfig, *more) -> tuple[tuple[str, float], ...]:
    """The fields the actor loss takes (its registry entry's ``options``), as static pairs, from
    ``learner`` or the first of ``more`` configs that has them (e.g. offline ArCHer's AWR β)."""
    out = []
    for name in learner.loss.options:
        owner = next((c for c in (learner, *more) if hasattr(c, name)), None)
        if owner is None:
            raise ValueError(f"actor_loss: {learner.actor_loss!r} takes {name!r}, which this agent's config has not")
        out.append((name, getattr(owner, name)))
    return tuple(out)
