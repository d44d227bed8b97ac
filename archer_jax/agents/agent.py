"""What every agent shares: its config's construction from a run's config, its optimizers and
fresh states, acting by the policy, and the replay buffer it learns from.

An algorithm is a subclass in a module of its own (``agents/archer.py``, ...) with

* ``Config``: a frozen dataclass, the single source of the algorithm's defaults and checks
  (``__post_init__`` raises ValueError naming the key); :meth:`Agent.config_of` builds it from a
  run's config (each field is the top-level key of its name, or the group in its metadata);
* ``networks_for(config)``: which networks the run builds for it (:class:`NetworkSpec`);
* ``__init__(parts, config)``: compiles the steps it needs (``parts.networks.compile_step``);
* ``learn(states, replay, iteration)``: one iteration's updates;
* ``programs(iterations)``: the learner programs an iteration runs, their abstract inputs and
  counts (:mod:`archer_jax.agents.programs`), which the plan compiles; ``pi_decodes``: the a_π
  decodes an iteration samples.

The run's shared parts (models, tokenizers, sampler, input pipeline, env pool, mesh, keys) are
:class:`archer_jax.parts.Parts`, which imports no agent.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import optax

from archer_jax.agents.programs import Program
from archer_jax.learners import bc, train_state
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.step_program import StepProgram
from archer_jax.learners.train_state import States, TrainState
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.replay import ReplayBuffer

if TYPE_CHECKING:  # only for type hints: the parts are built before the agent, from the config
    from archer_jax.parts import Parts


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    """The networks a run builds for its agent: the double critic, and the actor's value head
    (``token_baseline``; ``baseline_gradient``: its gradient flows into the policy;
    ``value_model``: on a separate copy of the policy's weights)."""

    critic: bool
    token_baseline: bool = False
    baseline_gradient: bool = False
    value_model: bool = False


def group(default_factory) -> dataclasses.Field:
    """A config field that is a key group of the run's config (``learner``, ``ppo``): its
    dataclass (``default_factory``'s), built from the keys of the group of the field's name."""
    return dataclasses.field(default_factory=default_factory, metadata={"group": True})


def check_value_head(networks, needed: bool, what: str) -> None:
    """A clear error when the actor has a value head (``Actor.baseline``) and ``what`` needs none, or the reverse."""
    if needed != networks.has_baseline:
        raise ValueError(f"{what} needs an Actor built with token_baseline={needed}")


def bc_step(networks, tx: optax.GradientTransformation, with_target: bool = False,
            limit: int | None | str = "networks") -> StepProgram:
    """The behaviour-cloning step on the actor (filtered BC, the SFT warm start), compiled."""
    return networks.compile_step(functools.partial(bc.bc_step, networks.actor_graphdef, tx),
                                 networks.actor_shardings(tx, with_target), networks.bc_batch_shardings(), limit=limit)


def timed(fn, *args):
    """``(fn(*args), seconds)``: how the loop and the agents time their phases."""
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def config_of(cls: type, run_config, groups: dict[str, str] | None = None) -> Any:
    """The dataclass ``cls`` from a run's config: each field is the top-level key of its name, or
    for a :func:`group` field, its dataclass from the group of its name (``groups`` renames a
    field's group: ``{"iql": "learner"}``), keeping the keys that dataclass has."""
    groups = groups or {}
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.metadata.get("group"):
            kind = type(field.default_factory())
            names = {f.name for f in dataclasses.fields(kind)}
            name = groups.get(field.name, field.name)
            try:
                kwargs[field.name] = kind(**{k: v for k, v in run_config[name].items() if k in names})
            except ValueError as e:  # its key, within its group
                raise ValueError(f"{name}.{e}") from None
        else:
            kwargs[field.name] = run_config[field.name]
    return cls(**kwargs)


def scoring_samples(config, run_config):
    """``config`` with ``learner.distribution`` the rollouts' sampling distribution
    (``config.sampling``'s temperature, top-k and top-p), unless its actor weighs a dataset's
    actions (``Config.dataset_actions``): a policy gradient on the policy's own samples is unbiased
    only under the distribution that drew them (``E_q[∇ log q] = 0``; not under the untempered model)."""
    learner = getattr(config, "learner", None)
    if learner is None or getattr(config, "dataset_actions", False):
        return config
    s = run_config.sampling
    distribution = TokenDistribution(float(s.temperature), int(s.top_k), float(s.top_p))
    return dataclasses.replace(config, learner=dataclasses.replace(learner, distribution=distribution))


class Agent:
    """An algorithm on a run's parts. This base acts by sampling the policy, learns from a replay
    buffer of its own rollouts, and trains its actor with Adam at ``learner.actor_lr``."""

    name: ClassVar[str]
    Config: ClassVar[type]
    learns_from_rollouts: ClassVar[bool] = True  # False: a fixed dataset; the envs only evaluate it
    pi_reads_critic: ClassVar[bool] = False  # its a_π reads the critic (CHAI's choice): drawn step by step

    def __init__(self, parts: Parts, config):
        self.parts, self.config = parts, config
        self.networks = parts.networks
        learner: LearnerConfig = config.learner
        spec = self.networks_for(config)
        check_value_head(self.networks, spec.token_baseline, f"agent {self.name!r}")
        self.actor_tx = self.actor_optimizer(learner.actor_lr)
        self.actor_target = False  # PPO's reference policy rides in the actor state's target
        self.critic_tx = train_state.optimizer(learner.critic_lr, learner.max_grad_norm) if spec.critic else None

    @classmethod
    def config_of(cls, run_config):
        """This agent's ``Config`` from a run's config (:func:`config_of`), scoring what it samples."""
        return scoring_samples(config_of(cls.Config, run_config), run_config)

    @classmethod
    def actor_waits_for_warmup(cls, config) -> bool:
        """Whether this agent's actor steps wait for ``warmup_iter`` critic-only iterations (none here)."""
        return False

    @classmethod
    def networks_for(cls, config) -> NetworkSpec:
        """The networks a run of this agent builds: by default the critic, and the actor's value
        head when the actor loss needs one."""
        return NetworkSpec(critic=True, token_baseline=config.learner.loss.needs_baseline)

    def actor_optimizer(self, learning_rate: float) -> optax.GradientTransformation:
        """The actor's optimizer at ``learning_rate``."""
        return train_state.optimizer(learning_rate, self.config.learner.max_grad_norm)

    # ---- states -----------------------------------------------------------------------------

    def init_actor(self, params=None) -> TrainState:
        """The actor's state with a fresh optimizer (from ``params``, e.g. an SFT result)."""
        return self.networks.init_actor(self.actor_tx, self.actor_target, params)

    def init_critic(self, params=None, target=None) -> TrainState:
        """The critic's state with a fresh optimizer (from ``params`` and ``target``, e.g. another run's)."""
        return self.networks.init_critic(self.critic_tx, params, target)

    def init_states(self) -> States:
        """Fresh states: the networks' initial parameters, fresh Adam, target = critic."""
        return States(self.init_actor(), self.init_critic() if self.critic_tx is not None else None)

    def policy(self, states: States):
        """The policy's parameters in ``states`` (what the sampler acts with)."""
        return self.networks.policy_params(states.actor)

    def pi_actions(self, states: States, sample: dict, key) -> list[str]:
        """``a_π`` for a critic step: a fresh sample from the current policy for each replayed observation."""
        return self.parts.acting.pi_actions(self.policy(states), sample["policy_observation"], key)

    def pi_actions_steps(self, states: States, samples: Sequence[dict], keys: Sequence) -> list[list[str]]:
        """:meth:`pi_actions` for several steps' samples at once (step ``s``: ``samples[s]`` with
        ``keys[s]``), each row drawn as in its own step, in the few decodes that fit."""
        return self.parts.acting.pi_actions_steps(self.policy(states), [s["policy_observation"] for s in samples], keys)

    def sft_step(self, learning_rate: float, limit: int | None = None) -> tuple[StepProgram, TrainState]:
        """The behaviour-cloning step of the SFT warm start (micro-batches of at most ``limit`` for
        "auto") and the state it starts from: the policy alone, without a value head or a reference
        copy, under Adam at ``learning_rate`` with the run's gradient clipping. Every algorithm runs
        this one program, so runs of any two from the same weights and demonstrations start from
        the same policy (:meth:`init_actor_from_sft` puts it in this agent's actor)."""
        networks = self.networks.policy_only()
        tx = train_state.optimizer(learning_rate, self.config.learner.max_grad_norm)
        return bc_step(networks, tx, False, limit), networks.init_actor(tx)

    def init_actor_from_sft(self, policy) -> TrainState:
        """The actor's state with a fresh optimizer from an SFT result (:meth:`sft_step`'s trained
        parameters); a value head starts as it was built."""
        return self.init_actor(self.networks.with_policy(policy))

    def abstract_actor(self) -> TrainState:
        """The actor state's shapes and shardings (no arrays): what the plan compiles a step from."""
        return self.networks.abstract_actor(self.actor_tx, self.actor_target)

    def abstract_critic(self) -> TrainState:
        """The critic state's shapes and shardings (no arrays)."""
        return self.networks.abstract_critic(self.critic_tx)

    # ---- acting and learning ------------------------------------------------------------------

    def programs(self, iterations: int) -> list[Program]:
        """The learner programs one iteration runs, in a run of ``iterations`` (none here)."""
        return []

    def pi_decodes(self, iterations: int) -> float:
        """Decodes of ``parts.batch`` a_π samples an iteration runs, averaged over ``iterations`` (none here)."""
        return 0.0

    def pi_phase_rows(self, iterations: int) -> int:
        """The a_π rows an iteration's critic phase draws together, in as few decodes as fit (none here)."""
        return 0

    def act(self, states: States, observations: Sequence[str], key: jax.Array, greedy: bool,
            rows: Sequence[int] | None = None) -> list[str]:
        """One utterance per observation: a sample of the policy (or its greedy utterance);
        ``rows`` are the observations' global game numbers (each dialogue's samples are keyed by its game)."""
        return self.parts.acting.sample(self.policy(states), observations, key, greedy=greedy, rows=rows)

    def learn(self, states: States, replay, iteration: int) -> tuple[States, dict[str, float]]:
        """One iteration's updates; returns the new states and the seconds of each phase."""
        raise NotImplementedError

    def new_replay(self, checkpoint: dict | None = None):
        """What this agent learns from: an empty replay buffer for its rollouts."""
        return ReplayBuffer(self.parts.config.capacity, seed=self.parts.config.seed)

    def resume_replay(self, restored):
        """The replay a checkpoint restored."""
        return restored
