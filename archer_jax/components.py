"""The pieces of a training run, built from a (validated) config: models, sampler, learner,
acting rules, env pool, replay buffer, and the run's random keys.

:mod:`archer_jax.train` runs the loop with these, and the agents (:mod:`archer_jax.agents`) run
their updates with them. Randomness is derived from ``config.seed`` and the iteration (JAX keys
by ``fold_in``, env seeds by ``SeedSequence``), plus the replay buffer's own generator, which is
checkpointed: a resumed run draws exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import logging
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax import agents, memory_plan, model_oracle, prompts
from archer_jax import sharding as shd
from archer_jax.acting import Acting
from archer_jax.data.offline_replay import OfflineReplay, open_dataset
from archer_jax.distributed import host_share
from archer_jax.envs import registry
from archer_jax.envs.pool import EnvPool
from archer_jax.input_pipeline import InputPipeline
from archer_jax.learners import actor_losses
from archer_jax.learners.ppo import PPOConfig
from archer_jax.learners.ppo_learner import PPOLearner
from archer_jax.learners.actor import Actor
from archer_jax.learners.critic import DoubleCritic
from archer_jax.learners.learner import Learner, LearnerConfig
from archer_jax.learners.micro_batching import auto_limit
from archer_jax.learners.train_state import States
from archer_jax.models import load_causal_lm, load_roberta, load_tokenizer
from archer_jax.models.lora import LoRAConfig, apply_lora
from archer_jax.models.tiny import model_directory
from archer_jax.precision import compute_dtype
from archer_jax.prompts import Prompter
from archer_jax.replay import ReplayBuffer
from archer_jax.sampling import Sampler, SamplingParams
from archer_jax.run.step_metrics import StepMetrics

class Components:
    """Builds everything a run needs from ``config`` (already validated)."""

    def __init__(self, config, workdir: Path):
        self.config = c = config
        self.workdir = Path(workdir)
        self.agent = agents.get(c.agent)
        self.key = jax.random.key(c.seed)
        self.mesh = shd.make_mesh(**c.mesh.to_dict())  # every process's devices
        self.local_mesh = shd.local_mesh(self.mesh)  # this process's: its sampler plays its games
        dtype = compute_dtype(c.model.dtype, self.mesh.devices.flat[0].platform)
        precision = c.model.matmul_precision

        policy_dir = model_directory(c.model.policy, self.workdir)
        policy_tokenizer = load_tokenizer(policy_dir)
        policy = load_causal_lm(policy_dir, dtype=dtype, param_dtype=jnp.dtype(c.model.param_dtype), remat=c.model.remat,
                                mesh=self.mesh if jax.process_count() == 1 else None)  # straight into its shardings
        if c.model.lora.rank:
            lora_config = LoRAConfig(rank=c.model.lora.rank, alpha=c.model.lora.alpha, dropout=c.model.lora.dropout,
                                     targets=tuple(t.strip() for t in c.model.lora.targets.split(",") if t.strip()))
            wrapped = apply_lora(policy, lora_config, rngs=nnx.Rngs(c.seed))
            logging.info("LoRA rank %d on %d projections of the policy; its other weights are frozen", lora_config.rank,
                         len(wrapped))
        room = policy.config.max_positions - c.sampling.max_new_tokens
        sampler = Sampler(policy, policy_tokenizer, mesh=self.local_mesh, max_prompt_length=min(c.model.max_prompt_length, room),
                          matmul_precision=precision)
        ppo = PPOConfig(**c.ppo, temperature=c.sampling.temperature) if self.agent.ppo else None
        token_baseline = actor_losses.get_actor_loss(c.learner.actor_loss).needs_baseline
        values = ppo is not None and ppo.estimator.needs_values
        value_model = None
        if values and ppo.value_head == "separate":  # PPO's critic model: a second copy of the policy's weights
            value_model = load_causal_lm(policy_dir, dtype=dtype, param_dtype=jnp.dtype(c.model.param_dtype),
                                         remat=c.model.remat, mesh=self.mesh if jax.process_count() == 1 else None)
        self.actor_module = Actor(
            policy, token_baseline=token_baseline or values, baseline_gradient=values and ppo.value_head == "shared",
            value_model=value_model, rngs=nnx.Rngs(c.seed),
        )
        critic, critic_tokenizer, max_critic_length = None, None, c.model.max_critic_length
        if self.agent.uses_critic(c):
            critic_dir = model_directory(c.model.critic, self.workdir)
            critic_tokenizer = load_tokenizer(critic_dir)
            encoder = load_roberta(critic_dir, dtype=dtype, remat=c.model.remat, seed=c.seed)
            critic = DoubleCritic(encoder, embedding=c.model.critic_embedding, rngs=nnx.Rngs(c.seed))
            max_critic_length = min(max_critic_length, encoder.config.max_position_embeddings - 2)
        self.encoder_config = encoder.config if critic is not None else None
        self._compute_bytes = dtype.itemsize
        platform = self.mesh.devices.flat[0].platform
        critic_rules = shd.REPLICATED_RULES if c.model.critic_sharding == "replicated" else shd.DEFAULT_RULES
        learner, extra = (PPOLearner, dict(ppo=ppo)) if ppo is not None else (Learner, {})
        self.learner = learner(self.actor_module, critic, LearnerConfig(**c.learner), mesh=self.mesh, matmul_precision=precision,
                               critic_rules=critic_rules, micro_batch_limit=auto_limit(platform, c.batch_size), **extra)
        prompter = Prompter(prompts.get(c.model.prompt_format), policy_tokenizer)
        self.pipeline = InputPipeline(policy_tokenizer, critic_tokenizer, sampler.max_prompt_length, max_critic_length,
                                      c.sampling.max_new_tokens, prompter)
        self.acting = Acting(
            sampler, self.pipeline, sampling=SamplingParams(**c.sampling, stop_strings=prompter.stop_strings),
            critic_graphdef=self.learner.critic_graphdef if critic is not None else None, chai_samples=c.chai_samples,
        )
        self.batch = c.batch_size * c.grad_accum_steps
        envs = max(len(host_share(c.rollout_size)), len(host_share(c.eval_size)), 1)  # this host's games
        self.pool = EnvPool(registry.env_factory(c, model_oracle.from_config(c)), envs, num_workers=c.env.workers, timeout_s=c.env.timeout_s)
        self.watchdog = StepMetrics(c.max_nonfinite_steps)

    def largest_activation(self) -> memory_plan.Activation:
        """The largest activation of a learner step on one device (:mod:`archer_jax.memory_plan`)."""
        c, policy = self.config, self.actor_module.policy.config
        encoder = self.encoder_config
        return memory_plan.largest_activation(
            rows=self.batch, mesh=self.mesh, policy_length=self.pipeline.max_prompt_length + c.sampling.max_new_tokens,
            action_length=c.sampling.max_new_tokens, vocab=policy.vocab_size, policy_width=policy.hidden_size,
            policy_heads=policy.num_heads, policy_mlp=getattr(policy, "intermediate_size", 4 * policy.hidden_size),
            critic_length=self.pipeline.max_critic_length if encoder else 0,
            critic_width=encoder.hidden_size if encoder else 0, critic_heads=encoder.num_attention_heads if encoder else 0,
            compute_bytes=self._compute_bytes,
        )

    def init_states(self) -> States:
        """Fresh states: the networks' initial parameters, fresh Adam, target = critic."""
        critic = self.learner.init_critic() if self.learner.has_critic else None
        return States(self.learner.init_actor(), critic)

    def new_replay(self, checkpoint: dict | None = None) -> ReplayBuffer | OfflineReplay:
        """An empty replay buffer; for an offline agent, its dataset (:mod:`archer_jax.data`;
        ``checkpoint``: the dataset state a resume restored)."""
        if self.agent.offline:
            return open_dataset(self.config, self.workdir, self.pipeline, checkpoint)
        return ReplayBuffer(self.config.capacity, seed=self.config.seed)

    def resume_replay(self, restored: ReplayBuffer | dict) -> ReplayBuffer | OfflineReplay:
        """The replay a checkpoint restored: its buffer, or an offline run's dataset drawing on
        from the checkpoint's sampler state."""
        return self.new_replay(restored).resume(restored) if isinstance(restored, dict) else restored

    def sft_learner(self) -> Learner:
        """A learner whose actor optimizer runs at ``config.sft.lr`` (for the warm start)."""
        c = self.config
        config = LearnerConfig(actor_lr=c.sft.lr, max_grad_norm=c.learner.max_grad_norm, actor_loss=c.learner.actor_loss,
                               micro_batch_size=c.learner.micro_batch_size)
        learner, extra = (PPOLearner, dict(ppo=self.learner.ppo)) if self.learner.ppo else (Learner, {})  # the run's actor
        return learner(self.actor_module, None, config, mesh=self.mesh, matmul_precision=self.config.model.matmul_precision,
                       micro_batch_limit=auto_limit(self.mesh.devices.flat[0].platform, c.sft.batch_size), **extra)

    def policy(self, states: States):
        """The policy's parameters in ``states`` (what the sampler acts with)."""
        return self.learner.policy_params(states.actor)

    def key_for(self, *path: int) -> jax.Array:
        """The run's key folded with ``path`` (a purpose, then e.g. the iteration and the step)."""
        key = self.key
        for p in path:
            key = jax.random.fold_in(key, p)
        return key

    def close(self) -> None:
        self.pool.close()
