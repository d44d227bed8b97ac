"""The ArCHer learner: jitted, sharded critic, actor and BC steps over a device mesh.

    learner = Learner(Actor(policy), DoubleCritic(encoder, rngs=nnx.Rngs(0)), mesh=make_mesh())
    critic_state, actor_state = learner.init_critic(), learner.init_actor()
    critic_state, metrics = learner.critic_step(critic_state, critic_batch)
    actor_state, metrics = learner.actor_step(actor_state, critic_state.params, actor_batch)

Parameters, target and optimizer moments are sharded by their logical axes
(:mod:`archer_jax.sharding`); batch arrays ``[batch, ...]`` are split on the batch axis over the
mesh's ``data``/``fsdp`` axes. Each step scans its batch in micro-batches chosen by memory
(``LearnerConfig.micro_batch_size``, :mod:`archer_jax.learners.micro_batching`). States passed to
a step are donated: use the returned state.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from archer_jax import sharding as shd
from archer_jax.precision import traced_with
from archer_jax.learners import actor_losses as registry  # the actor losses by name
from archer_jax.learners import archer, bc, offline_archer, train_state
from archer_jax.learners.actor import Actor
from archer_jax.learners.batches import ActorBatch, BCBatch, CriticBatch
from archer_jax.learners.critic import DoubleCritic
from archer_jax.learners.micro_batching import AUTO, StepProgram, parse_micro_batch_size
from archer_jax.learners.train_state import TrainState
from archer_jax.models.tokenizer import Tokens


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Hyperparameters of the learner (official online defaults, ``docs/algorithms.md``);
    ``LearnerConfig(**config.learner)`` builds it from a run's config."""

    gamma: float = 0.95
    tau: float = 0.1
    critic_lr: float = 2e-5
    actor_lr: float = 1e-6
    max_grad_norm: float = 1.0
    actor_loss: str = "actor_pg"  # a name in archer_jax.learners.actor_losses
    # Offline ArCHer (archer_jax/learners/offline_archer.py): V's expectile (0.5 = SARSA), what each
    # V head regresses to, and the AWR actor's β and weight clip (actor_loss="awr").
    expectile: float = 0.9
    iql_v_target: str = "min"
    awr_beta: float = 1.0
    awr_clip: float = 100.0
    # Transitions per scanned micro-batch: "auto" (the largest that fits the device) or a number
    # that cuts every step's batch evenly. Only memory depends on it, not the update.
    micro_batch_size: int | str = AUTO

    def __post_init__(self):
        parse_micro_batch_size(self.micro_batch_size)
        try:
            registry.get_actor_loss(self.actor_loss)
        except KeyError as e:
            raise ValueError(str(e).strip("\"'")) from None
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau must be in [0, 1], got {self.tau}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.expectile < 1.0:
            raise ValueError(f"expectile must be in (0, 1), got {self.expectile}")
        if self.iql_v_target not in offline_archer.V_TARGETS:
            raise ValueError(f"iql_v_target must be one of {offline_archer.V_TARGETS}, got {self.iql_v_target!r}")

    def loss_options(self) -> tuple[tuple[str, float], ...]:
        """The fields the actor loss takes (its registry entry's ``options``), as static pairs."""
        return tuple((name, getattr(self, name)) for name in registry.get_actor_loss(self.actor_loss).options)


def _host_values(params: nnx.State) -> nnx.State:
    """A module's parameters as host values when several processes share the mesh (a jitted
    program there takes global arrays or host values, not one process's device arrays)."""
    return jax.device_get(params) if jax.process_count() > 1 else params


class Learner:
    """Owns the networks' graphs, optimizers and shardings; steps are pure and jitted."""

    def __init__(
        self,
        actor: Actor,
        critic: DoubleCritic | None,
        config: LearnerConfig = LearnerConfig(),
        *,
        mesh: Mesh | None = None,
        rules: shd.Rules = shd.DEFAULT_RULES,
        critic_rules: shd.Rules | None = None,
        matmul_precision: str | None = None,
        micro_batch_limit: int | None = None,
    ):
        needs_baseline, what = self._value_head(config)
        if needs_baseline != (actor.baseline is not None):
            raise ValueError(f"{what} needs an Actor built with token_baseline={needs_baseline}")
        self.config = config
        self.mesh = mesh if mesh is not None else shd.single_device_mesh()
        self.rules = rules
        self.critic_rules = rules if critic_rules is None else critic_rules  # e.g. shd.REPLICATED_RULES
        self.matmul_precision = matmul_precision  # None: the ambient jax.default_matmul_precision
        # With LoRA adapters the policy's other weights are frozen: kept out of the gradients and
        # the optimizer, held once on the mesh, and attached to every actor state (TrainState.frozen).
        self.actor_graphdef, self._actor_params, frozen = train_state.split_trainable(actor)
        self.has_critic = critic is not None
        self.actor_tx = self._actor_optimizer(config)
        self.critic_tx = train_state.optimizer(config.critic_lr, config.max_grad_norm)
        self.actor_shardings = self._shardings(self._actor_params, self.actor_tx, with_target=self.actor_target)
        self._actor_frozen = None
        if frozen is not None:
            frozen_shardings = shd.state_shardings(frozen, self.mesh, rules)
            self.actor_shardings = self.actor_shardings._replace(frozen=frozen_shardings)
            self._actor_frozen = jax.device_put(_host_values(frozen), frozen_shardings)

        tokens = Tokens(self.batch_sharding(2), self.batch_sharding(2))
        critic_batch = CriticBatch(tokens, tokens, tokens, tokens, self.batch_sharding(1), self.batch_sharding(1))
        c = config
        self._program = functools.partial(StepProgram, mesh=self.mesh, micro_batch_size=c.micro_batch_size,
                                          limit=micro_batch_limit, donate_argnums=(0,))
        if critic is not None:  # filtered BC trains the actor alone
            self.critic_graphdef, self._critic_params = train_state.split_params(critic)
            self.critic_shardings = self._shardings(self._critic_params, self.critic_tx, with_target=True,
                                                    rules=self.critic_rules)
            self._critic_step = self.step_program(self._traced(archer.critic_step, self.critic_graphdef, self.critic_tx,
                                                               c.gamma, c.tau), self.critic_shardings, critic_batch)
            self._iql_critic_step = self.step_program(
                self._traced(offline_archer.iql_critic_step, self.critic_graphdef, self.critic_tx, c.gamma, c.tau,
                             c.expectile, c.iql_v_target), self.critic_shardings, critic_batch)
            self._actor_step = self.step_program(
                self._traced(functools.partial(archer.actor_step, loss_options=c.loss_options()), self.actor_graphdef,
                             self.critic_graphdef, self.actor_tx, c.actor_loss),
                self.actor_shardings, self.critic_shardings.params, ActorBatch(tokens, tokens, tokens, tokens))
        self._bc_step = self.step_program(self._traced(bc.bc_step, self.actor_graphdef, self.actor_tx),
                                          self.actor_shardings, BCBatch(tokens, tokens))

    actor_target, ppo = False, None  # PPOLearner: a reference policy as the actor state's target; its config

    def _value_head(self, config: LearnerConfig) -> tuple[bool, str]:
        """Whether the actor needs its value head (``Actor.baseline``), and what needs it (for errors)."""
        return registry.get_actor_loss(config.actor_loss).needs_baseline, f"actor_loss {config.actor_loss!r}"

    def step_program(self, step, state_shardings: TrainState, *inputs) -> StepProgram:
        """``step(state, *inputs)`` jitted over the shardings given (its state donated), returning
        the new state and replicated metrics."""
        return self._program(step, in_shardings=(state_shardings, *inputs),
                             out_shardings=(state_shardings, shd.replicated(self.mesh)))

    def _actor_optimizer(self, config: LearnerConfig) -> optax.GradientTransformation:
        return train_state.optimizer(config.actor_lr, config.max_grad_norm)

    def _traced(self, step, *static):
        """``step`` with its static arguments bound, traced under the learner's matmul precision."""
        return traced_with(functools.partial(step, *static), self.matmul_precision)

    def programs(self) -> dict[str, StepProgram]:
        """The steps by name (to ``.lower(...)`` them, or read their micro-batch ``.layouts``)."""
        names = ("critic_step", "iql_critic_step", "actor_step", "bc_step") if self.has_critic else ("bc_step",)
        return {name: getattr(self, f"_{name}") for name in names}

    def _shardings(self, params: nnx.State, tx: optax.GradientTransformation, with_target: bool,
                   rules: shd.Rules | None = None) -> TrainState:
        abstract = jax.eval_shape(functools.partial(train_state.create, tx=tx, with_target=with_target), params)
        return train_state.shardings(abstract, tx, self.mesh, self.rules if rules is None else rules)

    def batch_sharding(self, ndim: int) -> NamedSharding:
        """``[batch, ...]``: the batch axis over the mesh's data axes."""
        return shd.batch_sharding(self.mesh, ndim, batch_dim=0)

    # ---- states -----------------------------------------------------------------------------

    def init_critic(self, params: nnx.State | None = None, target: nnx.State | None = None) -> TrainState:
        """The critic's state with fresh Adam, from the module's parameters or ``params`` (e.g. another
        run's critic); the target is ``target`` if given, else a copy of the parameters."""
        self._check()
        create = jax.jit(
            functools.partial(train_state.create, tx=self.critic_tx, with_target=True),
            out_shardings=self.critic_shardings,
        )
        state = create(_host_values(self._critic_params) if params is None else params)
        if target is not None:
            state = state._replace(target=jax.device_put(target, self.critic_shardings.target))
        return state

    def init_actor(self, params: nnx.State | None = None) -> TrainState:
        """The actor's state with fresh Adam, from the module's parameters or ``params`` (e.g. the
        result of an SFT warm start); with ``actor_target`` (PPO's KL penalty), its ``target`` is a
        copy of them: the reference policy."""
        create = jax.jit(functools.partial(train_state.create, tx=self.actor_tx, with_target=self.actor_target),
                         out_shardings=self.actor_shardings._replace(frozen=None))
        state = create(_host_values(self._actor_params) if params is None else params)
        return state._replace(frozen=self._actor_frozen)  # attached, never copied

    def policy_params(self, actor_state: TrainState) -> nnx.State:
        """The policy's parameters inside an actor state (e.g. for the sampler): its trained ones,
        and with LoRA its frozen base weights too."""
        if actor_state.frozen is None:
            return actor_state.params["policy"]
        return nnx.merge_state(actor_state.params["policy"], actor_state.frozen["policy"])

    # ---- steps ------------------------------------------------------------------------------

    def _check(self, batch=None, critic: bool = True) -> None:
        """A clear error for a critic step of a learner without a critic, or a batch whose arrays disagree."""
        if critic and not self.has_critic:
            raise ValueError("this learner was built without a critic (critic=None)")
        sizes = {leaf.shape[0] for leaf in jax.tree.leaves(batch)}
        if len(sizes) > 1:
            raise ValueError(f"batch arrays disagree on the batch size: {sorted(sizes)}")

    def critic_step(self, state: TrainState, batch: CriticBatch) -> tuple[TrainState, dict]:
        """One critic optimizer step (gradients averaged over the batch) + Polyak."""
        self._check(batch)
        return self._critic_step(state, batch)

    def iql_critic_step(self, state: TrainState, batch: CriticBatch) -> tuple[TrainState, dict]:
        """One offline (IQL) critic step on dataset transitions + Polyak (``batch.pi_action`` unused)."""
        self._check(batch)
        return self._iql_critic_step(state, batch)

    def actor_step(self, state: TrainState, critic_params: nnx.State, batch: ActorBatch) -> tuple[TrainState, dict]:
        """One actor step with the advantage of the online critic (``critic_params``, unchanged)."""
        self._check(batch)
        return self._actor_step(state, critic_params, batch)

    def bc_step(self, state: TrainState, batch: BCBatch) -> tuple[TrainState, dict]:
        """One behaviour-cloning (SFT) step on the actor."""
        self._check(batch, critic=False)
        return self._bc_step(state, batch)
