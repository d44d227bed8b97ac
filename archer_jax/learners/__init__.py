"""ArCHer's learners: the double critic, the actor, their losses and jitted, sharded steps.

    from archer_jax import learners
    critic = learners.DoubleCritic(models.load_roberta("roberta-base"), rngs=nnx.Rngs(0))
    learner = learners.Learner(learners.Actor(models.load_gpt2("gpt2")), critic, mesh=mesh)
"""

from archer_jax.learners.actor import Actor, TokenBaseline, action_logprobs, pack
from archer_jax.learners.chai import ChaiChoice, chai_actions
from archer_jax.learners.critic import DoubleCritic, MLPHead, Tokens
from archer_jax.learners.learner import Learner, LearnerConfig
from archer_jax.learners.losses import LOSSES, CriticValues, advantage, get_loss, polyak, td_targets
from archer_jax.learners.selection import chai_select, filtered_bc_mask
from archer_jax.learners.steps import ActorBatch, BCBatch, CriticBatch
from archer_jax.learners.train_state import TrainState, split_params

__all__ = [
    "LOSSES",
    "Actor",
    "ActorBatch",
    "BCBatch",
    "ChaiChoice",
    "CriticBatch",
    "CriticValues",
    "DoubleCritic",
    "Learner",
    "LearnerConfig",
    "MLPHead",
    "TokenBaseline",
    "Tokens",
    "TrainState",
    "action_logprobs",
    "advantage",
    "chai_actions",
    "chai_select",
    "filtered_bc_mask",
    "get_loss",
    "pack",
    "polyak",
    "split_params",
    "td_targets",
]
