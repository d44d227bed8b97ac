"""The shared parts of a training run, built from a (validated) config: models, tokenizers,
sampler, input pipeline, acting rules, env pool, mesh, and the run's random keys.

    parts = Parts(config, workdir, agent_class.networks_for(agent_config))
    agent = agent_class(parts, agent_config)

The agents (:mod:`archer_jax.agents`) build their steps and run their updates with these, and
:mod:`archer_jax.train` runs the loop; nothing here knows an algorithm: ``spec`` says which
networks to build. Randomness is derived from ``config.seed`` and the iteration (JAX keys by
``fold_in``, env seeds by ``SeedSequence``), plus the replay buffer's own generator, which is
checkpointed: a resumed run draws exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax import model_oracle
from archer_jax.acting import Acting
from archer_jax.envs import registry
from archer_jax.envs.pool import EnvPool
from archer_jax.input_pipeline import InputPipeline
from archer_jax.learners.actor import Actor
from archer_jax.learners.critic import DoubleCritic
from archer_jax.learners.micro_batching import auto_limit
from archer_jax.learners.networks import Networks
from archer_jax.models import load_causal_lm, load_roberta, load_tokenizer
from archer_jax.models.lora import apply_lora
from archer_jax.models.tiny import model_directory
from archer_jax.records.step_metrics import StepMetrics
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.distributed import host_share
from archer_jax.runtime.precision import compute_dtype
from archer_jax.sampling import Sampler
from archer_jax.sampling import prompts
from archer_jax.sampling.prompts import Prompter

# Purposes folded into the run's key, so each phase draws its own numbers.
ROLLOUT, CRITIC, ACTOR, EVAL = range(4)


def with_lora(c, policy) -> list:
    """The run's LoRA adapters (``config.model.lora``) on ``policy``, in place; the projections wrapped."""
    return apply_lora(policy, c.model.lora, rngs=nnx.Rngs(c.seed))


def prompt_length(c, policy_config) -> int:
    """The longest prompt the sampler takes: ``model.max_prompt_length``, within the policy's positions."""
    return min(c.model.max_prompt_length, policy_config.max_positions - c.sampling.max_new_tokens)


def critic_length(c, encoder_config) -> int:
    """The longest critic input: ``model.max_critic_length``, within the encoder's positions."""
    return min(c.model.max_critic_length, encoder_config.max_position_embeddings - 2)


def actor_module(c, spec, policy, value_model=None) -> Actor:
    """The run's actor on ``policy``: the value head (or value model) ``spec`` asks for."""
    return Actor(policy, token_baseline=spec.token_baseline, baseline_gradient=spec.baseline_gradient,
                 value_model=value_model, rngs=nnx.Rngs(c.seed))


def critic_module(c, encoder) -> DoubleCritic:
    """The run's double critic on ``encoder``."""
    return DoubleCritic(encoder, embedding=c.model.critic_embedding, rngs=nnx.Rngs(c.seed))


def run_networks(c, mesh, actor: Actor, critic: DoubleCritic | None) -> Networks:
    """The run's networks on ``mesh``: the critic's sharding rule, the steps' matmul precision and
    micro-batch settings (``micro_batch_size="auto"`` limited to ``batch_size`` on CPUs)."""
    platform = mesh.devices.flat[0].platform
    critic_rules = shd.REPLICATED_RULES if c.model.critic_sharding == "replicated" else shd.DEFAULT_RULES
    return Networks(actor, critic, mesh=mesh, matmul_precision=c.model.matmul_precision, critic_rules=critic_rules,
                    micro_batch_size=c.learner.micro_batch_size, micro_batch_limit=auto_limit(platform, c.batch_size))


class Parts:
    """Builds everything a run shares from ``config`` (the typed
    :class:`~archer_jax.config.RunConfig` that validation returns); ``spec`` (an agent's
    :class:`~archer_jax.agents.agent.NetworkSpec`) says which networks."""

    def __init__(self, config, workdir: Path, spec):
        self.config = c = config
        self.workdir = Path(workdir)
        self.key = jax.random.key(c.seed)
        self.mesh = shd.make_mesh(**dataclasses.asdict(c.mesh))  # every process's devices
        self.local_mesh = shd.local_mesh(self.mesh)  # this process's: its sampler plays its games
        dtype = compute_dtype(c.model.dtype, self.mesh.devices.flat[0].platform)
        precision = c.model.matmul_precision

        policy_dir = model_directory(c.model.policy, self.workdir)
        policy_tokenizer = load_tokenizer(policy_dir)
        policy = load_causal_lm(policy_dir, dtype=dtype, param_dtype=jnp.dtype(c.model.param_dtype), remat=c.model.remat,
                                mesh=self.mesh if jax.process_count() == 1 else None)  # straight into its shardings
        if c.model.lora.rank:
            wrapped = with_lora(c, policy)
            logging.info("LoRA rank %d on %d projections of the policy; its other weights are frozen", c.model.lora.rank,
                         len(wrapped))
        sampler = Sampler(policy, policy_tokenizer, mesh=self.local_mesh, max_prompt_length=prompt_length(c, policy.config),
                          matmul_precision=precision)
        value_model = None
        if spec.value_model:  # PPO's critic model: a second copy of the policy's weights
            value_model = load_causal_lm(policy_dir, dtype=dtype, param_dtype=jnp.dtype(c.model.param_dtype),
                                         remat=c.model.remat, mesh=self.mesh if jax.process_count() == 1 else None)
        self.actor_module = actor_module(c, spec, policy, value_model)
        critic, critic_tokenizer, max_critic_length = None, None, c.model.max_critic_length
        if spec.critic:
            critic_dir = model_directory(c.model.critic, self.workdir)
            critic_tokenizer = load_tokenizer(critic_dir)
            encoder = load_roberta(critic_dir, dtype=dtype, remat=c.model.remat, seed=c.seed)
            critic = critic_module(c, encoder)
            max_critic_length = critic_length(c, encoder.config)
        self.encoder_config = encoder.config if critic is not None else None
        self.networks = run_networks(c, self.mesh, self.actor_module, critic)
        prompter = Prompter(prompts.get(c.model.prompt_format), policy_tokenizer)
        self.pipeline = InputPipeline(policy_tokenizer, critic_tokenizer, sampler.max_prompt_length, max_critic_length,
                                      c.sampling.max_new_tokens, prompter,
                                      critic_action_in_context=c.model.critic_action == "in_context")
        self.acting = Acting(
            sampler, self.pipeline, sampling=dataclasses.replace(c.sampling, stop_strings=prompter.stop_strings),
            score_stop_token=c.learner.score_stop_token,
        )
        self.batch = c.batch_size * c.grad_accum_steps
        # The longest token buckets of learner batches (as the plan's parts have them).
        self.max_prompt_length, self.max_critic_length = sampler.max_prompt_length, max_critic_length
        self.action_length = self.pipeline.action_bucket
        self.critic_action_length = max_critic_length if c.model.critic_action == "in_context" else self.action_length
        envs = max(len(host_share(c.rollout_size)), len(host_share(c.eval_size)), 1)  # this host's games
        if c.rollout.slots:  # continuous batching: that many dialogues at once
            envs = min(envs, c.rollout.slots)
        self.pool = EnvPool(registry.env_factory(c.env, model_oracle.from_config(c.env)), envs, num_workers=c.env.workers,
                            timeout_s=c.env.timeout_s)
        self.metrics = StepMetrics(c.max_nonfinite_steps)  # the steps' metrics, and the non-finite watchdog

    def key_for(self, *path: int) -> jax.Array:
        """The run's key folded with ``path`` (a purpose, then e.g. the iteration and the step)."""
        key = self.key
        for p in path:
            key = jax.random.fold_in(key, p)
        return key

    def close(self) -> None:
        self.pool.close()
