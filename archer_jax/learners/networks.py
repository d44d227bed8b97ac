"""The networks a run trains, apart from any algorithm: their graphs, shardings and fresh states.

    networks = Networks(Actor(policy), DoubleCritic(encoder, rngs=nnx.Rngs(0)), mesh=make_mesh())
    tx = train_state.optimizer(1e-5, 1.0)
    critic = networks.init_critic(tx)
    program = networks.compile_step(functools.partial(step, networks.critic_graphdef, tx),
                                    networks.critic_shardings(tx), networks.critic_batch_shardings())

Parameters, target and optimizer moments are sharded by their logical axes
(:mod:`archer_jax.runtime.sharding`); batch arrays ``[batch, ...]`` are split on the batch axis over the
mesh's ``data``/``fsdp`` axes. Each algorithm (:mod:`archer_jax.agents`) picks its optimizers and
compiles the steps it needs with :meth:`Networks.compile_step`; states passed to a step are
donated: use the returned state.
"""

from __future__ import annotations

import functools

import jax
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from archer_jax.learners import train_state
from archer_jax.learners.actor import Actor
from archer_jax.learners.batches import ActorBatch, BCBatch, CriticBatch
from archer_jax.learners.critic import DoubleCritic
from archer_jax.learners.micro_batching import AUTO
from archer_jax.learners.step_program import StepProgram, abstract, is_abstract
from archer_jax.learners.train_state import TrainState
from archer_jax.models.tokenizer import Tokens
from archer_jax.runtime import sharding as shd


def _host_values(params: nnx.State) -> nnx.State:
    """A module's parameters as host values when several processes share the mesh (a jitted
    program there takes global arrays or host values, not one process's device arrays)."""
    return jax.device_get(params) if jax.process_count() > 1 else params


class Networks:
    """The actor (and critic) modules split into graphs and parameters, placed on ``mesh``.

    ``critic_rules`` places the critic (e.g. ``shd.REPLICATED_RULES``); ``matmul_precision`` is
    the steps' (None: the ambient one); ``micro_batch_size`` and ``micro_batch_limit`` cut every
    step's batch (:mod:`archer_jax.learners.micro_batching`).
    """

    def __init__(self, actor: Actor, critic: DoubleCritic | None = None, *, mesh: Mesh | None = None,
                 rules: shd.Rules = shd.DEFAULT_RULES, critic_rules: shd.Rules | None = None,
                 matmul_precision: str | None = None, micro_batch_size: int | str = AUTO,
                 micro_batch_limit: int | None = None):
        self.mesh = mesh if mesh is not None else shd.single_device_mesh()
        self.rules = rules
        self.critic_rules = rules if critic_rules is None else critic_rules
        self.matmul_precision = matmul_precision
        self.micro_batch_size, self.micro_batch_limit = micro_batch_size, micro_batch_limit
        self.has_baseline = actor.baseline is not None
        self._policy = actor.policy  # for policy_only(): the same variables, none copied
        # With LoRA adapters the policy's other weights are frozen: kept out of the gradients and
        # the optimizer, held once on the mesh, and attached to every actor state (TrainState.frozen).
        self.actor_graphdef, self._actor_params, frozen = train_state.split_trainable(actor)
        self._frozen_shardings = self._frozen = None
        if frozen is not None:
            self._frozen_shardings = shd.state_shardings(frozen, self.mesh, rules)
            self._frozen = (abstract(frozen, self._frozen_shardings) if is_abstract(frozen)
                            else jax.device_put(_host_values(frozen), self._frozen_shardings))
        self.has_critic = critic is not None
        self.critic_graphdef = self._critic_params = None
        if critic is not None:  # filtered BC and most PPO runs train the actor alone
            self.critic_graphdef, self._critic_params = train_state.split_params(critic)

    # ---- shardings --------------------------------------------------------------------------

    def _shardings(self, params: nnx.State, tx: optax.GradientTransformation, with_target: bool,
                   rules: shd.Rules) -> TrainState:
        abstract = jax.eval_shape(functools.partial(train_state.create, tx=tx, with_target=with_target), params)
        return train_state.shardings(abstract, tx, self.mesh, rules)

    def actor_shardings(self, tx: optax.GradientTransformation, with_target: bool = False) -> TrainState:
        """The shardings of an actor state with optimizer ``tx`` (and a target: a reference policy)."""
        return self._shardings(self._actor_params, tx, with_target, self.rules)._replace(frozen=self._frozen_shardings)

    def critic_shardings(self, tx: optax.GradientTransformation) -> TrainState:
        """The shardings of a critic state (with its target) with optimizer ``tx``."""
        self._check_critic()
        return self._shardings(self._critic_params, tx, True, self.critic_rules)

    def batch_sharding(self, ndim: int) -> NamedSharding:
        """``[batch, ...]``: the batch axis over the mesh's data axes."""
        return shd.batch_sharding(self.mesh, ndim, batch_dim=0)

    def tokens_sharding(self) -> Tokens:
        """The shardings of a :class:`Tokens` batch field."""
        return Tokens(self.batch_sharding(2), self.batch_sharding(2))

    def critic_batch_shardings(self) -> CriticBatch:
        tokens = self.tokens_sharding()
        return CriticBatch(tokens, tokens, tokens, tokens, self.batch_sharding(1), self.batch_sharding(1))

    def actor_batch_shardings(self) -> ActorBatch:
        tokens = self.tokens_sharding()
        return ActorBatch(tokens, tokens, tokens, tokens)

    def bc_batch_shardings(self) -> BCBatch:
        tokens = self.tokens_sharding()
        return BCBatch(tokens, tokens)

    # ---- programs ---------------------------------------------------------------------------

    def compile_step(self, step, state_shardings: TrainState, *inputs, limit: int | None | str = "networks",
                     micro_batch_size: int | str | None = None) -> StepProgram:
        """``step(state, *inputs)`` (its static arguments bound with ``functools.partial``) as a
        :class:`~archer_jax.learners.step_program.StepProgram` on this mesh, with these micro-batch
        settings and this matmul precision (``limit``, ``micro_batch_size``: other ones)."""
        return StepProgram(step, state_shardings, *inputs, mesh=self.mesh,
                           micro_batch_size=self.micro_batch_size if micro_batch_size is None else micro_batch_size,
                           limit=self.micro_batch_limit if limit == "networks" else limit,
                           matmul_precision=self.matmul_precision)

    # ---- states -----------------------------------------------------------------------------

    def init_actor(self, tx: optax.GradientTransformation, with_target: bool = False,
                   params: nnx.State | None = None) -> TrainState:
        """The actor's state with fresh ``tx``, from the module's parameters or ``params`` (e.g. the
        result of an SFT warm start); ``with_target``: its ``target`` is a copy of them (PPO's
        reference policy)."""
        shardings = self.actor_shardings(tx, with_target)
        create = jax.jit(functools.partial(train_state.create, tx=tx, with_target=with_target),
                         out_shardings=shardings._replace(frozen=None))
        state = create(_host_values(self._actor_params) if params is None else params)
        return state._replace(frozen=self._frozen)  # attached, never copied

    def init_critic(self, tx: optax.GradientTransformation, params: nnx.State | None = None,
                    target: nnx.State | None = None) -> TrainState:
        """The critic's state with fresh ``tx``, from the module's parameters or ``params`` (e.g.
        another run's critic); the target is ``target`` if given, else a copy of the parameters."""
        shardings = self.critic_shardings(tx)
        create = jax.jit(functools.partial(train_state.create, tx=tx, with_target=True), out_shardings=shardings)
        state = create(self.initial_critic_params() if params is None else params)
        if target is not None:
            state = state._replace(target=jax.device_put(target, shardings.target))
        return state

    def initial_critic_params(self) -> nnx.State:
        """The critic's parameters as built (host values when several processes share the mesh)."""
        self._check_critic()
        return _host_values(self._critic_params)

    def abstract_actor(self, tx: optax.GradientTransformation, with_target: bool = False) -> TrainState:
        """An actor state's shapes and shardings, no arrays (:class:`jax.ShapeDtypeStruct` leaves):
        what a step lowers from to be compiled without weights."""
        shape = jax.eval_shape(functools.partial(train_state.create, tx=tx, with_target=with_target), self._actor_params)
        state = abstract(shape, self.actor_shardings(tx, with_target)._replace(frozen=None))
        if self._frozen_shardings is None:
            return state
        return state._replace(frozen=abstract(jax.eval_shape(lambda x: x, self._frozen), self._frozen_shardings))

    def abstract_critic(self, tx: optax.GradientTransformation) -> TrainState:
        """A critic state's shapes and shardings, no arrays (see :meth:`abstract_actor`)."""
        shape = jax.eval_shape(functools.partial(train_state.create, tx=tx, with_target=True), self._critic_params)
        return abstract(shape, self.critic_shardings(tx))

    def policy_params(self, actor_state: TrainState) -> nnx.State:
        """The policy's parameters inside an actor state (e.g. for the sampler): its trained ones,
        and with LoRA its frozen base weights too."""
        if actor_state.frozen is None:
            return actor_state.params["policy"]
        return nnx.merge_state(actor_state.params["policy"], actor_state.frozen["policy"])

    def policy_only(self) -> Networks:
        """These networks' policy alone (no value head, no critic), on the same mesh with the same
        settings and the same parameter arrays (none copied); these networks themselves when the
        actor has no value head."""
        if not self.has_baseline:
            return self
        return Networks(Actor(self._policy), mesh=self.mesh, rules=self.rules, matmul_precision=self.matmul_precision,
                        micro_batch_size=self.micro_batch_size, micro_batch_limit=self.micro_batch_limit)

    def with_policy(self, policy: nnx.State) -> nnx.State:
        """The actor's trained parameters as built, the policy's replaced by ``policy`` (the trained
        parameters of :meth:`policy_only`'s actor, e.g. an SFT result)."""
        return nnx.merge_state(_host_values(self._actor_params), policy) if self.has_baseline else policy

    def _check_critic(self) -> None:
        if not self.has_critic:
            raise ValueError("these networks were built without a critic (critic=None)")
