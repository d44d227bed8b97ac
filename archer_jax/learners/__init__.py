"""Learning, apart from acting: the networks, their losses and estimators, and jitted, sharded steps.

    from archer_jax import learners
    critic = learners.DoubleCritic(models.load_roberta("roberta-base"), rngs=nnx.Rngs(0))
    networks = learners.Networks(learners.Actor(models.load_gpt2("gpt2")), critic, mesh=mesh)

* :mod:`~archer_jax.learners.archer`: ArCHer's critic and actor steps (the paper's algorithm box),
  with its TD targets and advantage; :mod:`~archer_jax.learners.bc`: the behaviour-cloning step
  (filtered BC, SFT).
* :mod:`~archer_jax.learners.losses` (pure losses), :mod:`~archer_jax.learners.actor_losses` (actor
  losses by name), :mod:`~archer_jax.learners.ppo_estimators` (PPO's advantage estimators by name),
  :mod:`~archer_jax.learners.optimization` (micro-batch gradients, Adam, non-finite guard, Polyak).
* :mod:`~archer_jax.learners.critic`, :mod:`~archer_jax.learners.actor`: the networks.
* :mod:`~archer_jax.learners.batches`: batch types and their layout from token rows.
* :class:`~archer_jax.learners.networks.Networks`: the networks' graphs, shardings and states;
  :class:`~archer_jax.learners.step_program.StepProgram` jits a step with explicit shardings (each
  algorithm in :mod:`archer_jax.agents` compiles the steps it needs).
* :class:`~archer_jax.learners.learner_config.LearnerConfig`: the learner's shared hyperparameters.
"""

from archer_jax.learners.actor import Actor, TokenBaseline, action_logprobs, pack
from archer_jax.learners.actor_losses import ACTOR_LOSSES, ActorLoss, PolicyTerms, get_actor_loss
from archer_jax.learners.archer import advantage, td_targets
from archer_jax.learners.batches import ActorBatch, BCBatch, CriticBatch
from archer_jax.learners.critic import CriticValues, DoubleCritic, MLPHead
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.networks import Networks
from archer_jax.learners.step_program import StepProgram
from archer_jax.learners.optimization import polyak
from archer_jax.learners.selection import chai_select, filtered_bc_mask
from archer_jax.learners.train_state import TrainState, split_params
from archer_jax.models.tokenizer import Tokens

__all__ = [
    "ACTOR_LOSSES",
    "Actor",
    "ActorBatch",
    "ActorLoss",
    "BCBatch",
    "CriticBatch",
    "CriticValues",
    "DoubleCritic",
    "LearnerConfig",
    "MLPHead",
    "Networks",
    "PolicyTerms",
    "StepProgram",
    "TokenBaseline",
    "Tokens",
    "TrainState",
    "action_logprobs",
    "advantage",
    "chai_select",
    "filtered_bc_mask",
    "get_actor_loss",
    "pack",
    "polyak",
    "split_params",
    "td_targets",
]
