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


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """``config.learner``'s shared keys; ``__post_init__`` raises ValueError naming the key."""

    gamma: float = 0.95
    tau: float = 0.1
    critic_lr: float = 2e-5
    actor_lr: float = 1e-6
    # Each network's gradient is clipped to this global norm: > 0, always on (as in the official
    # code). 0 or less is refused rather than taken as "off" (in PyTorch a 0 norm would zero
    # every gradient, not skip clipping); a huge value such as 1e9 never clips.
    max_grad_norm: float = 1.0
    actor_loss: str = "actor_pg"  # a name in archer_jax.learners.actor_losses
    # Transitions per scanned micro-batch of a step: "auto" (the largest that fits the device,
    # from the compiled step's memory analysis; on CPUs at most batch_size, faster there) or a
    # number that cuts every step's batch evenly (8 = the official layout). Only memory and
    # speed depend on it, not the update.
    micro_batch_size: int | str = AUTO
    # ArCHer's actor: subtract the step batch's mean advantage from each row's (a baseline for what
    # the critic's Q and V have in common, e.g. the V head's lag behind the target Q it learns from).
    # Off: the paper's advantage Q - V as it is.
    center_advantage: bool = False
    # ArCHer's actor: the stop token that ends a sampled a_π is scored (its probability trained
    # like any other token's). False scores a_π without it, as the official code does.
    score_stop_token: bool = True
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
