"""A run's parts from its config alone, for a plan: the networks and the policy's decoder built from
the models' ``config.json`` without weights (``nnx.eval_shape``), on a target's devices.

    parts = PlanParts(config, target.devices(), workdir)
    agent = agent_class(parts, config.algorithm)   # the run's own steps, compiled lazily
    parts.decoder.lower(sampling, rows, prompt_length)          # the sampler's prefill and decode

The agent builds its steps exactly as in a run (``parts.networks.compile_step``): the programs a
plan compiles are the ones the train app runs. No host ever holds the weights; the models' shapes
come from a directory, the Hugging Face cache, the hub (online) or the copies of well-known
configs in the package (:func:`archer_jax.models.hub.known_config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax import parts as run_parts
from archer_jax.errors import ConfigError
from archer_jax.models import hub
from archer_jax.models.pretrained import ARCHITECTURES, CAUSAL_LM_TYPES
from archer_jax.models.tiny import model_directory, tiny_kind
from archer_jax.models.tokenizer import next_power_of_two
from archer_jax.runtime import sharding as shd
from archer_jax.runtime.precision import compute_dtype
from archer_jax.sampling.decoding import Decoder


def model_config(name: str, workdir: Path) -> dict:
    """``config.json`` of the model a config names (``tiny:*`` models are built under ``workdir``)."""
    if tiny_kind(name) is not None:
        return hub.read_config(Path(model_directory(name, workdir)))
    found = hub.known_config(name)
    if found is None:
        raise ConfigError(f"{name}: no config.json for this model here (not a directory, not in the Hugging Face "
                          "cache, no copy in the package, and the hub cannot be reached): pass a model directory")
    return found


def abstract_model(config_dict: dict, types: Sequence[str], *, dtype, param_dtype, remat: str, seed: int):
    """The module ``config_dict`` describes, built with shapes only (call inside ``nnx.eval_shape``)."""
    found = config_dict.get("model_type")
    if found not in types:
        raise ConfigError(f"model_type {found!r}: expected {' or '.join(map(repr, types))}")
    arch = ARCHITECTURES[found]
    return arch.module_cls(arch.config_cls.from_hf_dict(config_dict), dtype=dtype, param_dtype=param_dtype,
                           remat=remat, rngs=nnx.Rngs(seed))


class PlanParts:
    """What an agent's constructor reads of a run's parts (its config, mesh and networks), and
    the policy's decoder and the run's token lengths, built without weights on ``devices``."""

    def __init__(self, config, devices: Sequence[jax.Device], workdir: Path, spec):
        self.config = c = config
        self.mesh = shd.make_mesh(**dataclasses.asdict(c.mesh), devices=list(devices))
        self.host_mesh = shd.local_mesh(self.mesh, process=0)  # one host's sampler plays its games here
        self.hosts = len({d.process_index for d in self.mesh.devices.flat})
        platform = self.mesh.devices.flat[0].platform
        dtype = compute_dtype(c.model.dtype, platform)
        param_dtype = jnp.dtype(c.model.param_dtype)
        policy_config = model_config(c.model.policy, workdir)
        critic_config = model_config(c.model.critic, workdir) if spec.critic else None

        def build():
            policy = abstract_model(policy_config, CAUSAL_LM_TYPES, dtype=dtype, param_dtype=param_dtype,
                                    remat=c.model.remat, seed=c.seed)
            if c.model.lora.rank:
                run_parts.with_lora(c, policy)
            value_model = abstract_model(policy_config, CAUSAL_LM_TYPES, dtype=dtype, param_dtype=param_dtype,
                                         remat=c.model.remat, seed=c.seed) if spec.value_model else None
            actor = run_parts.actor_module(c, spec, policy, value_model)
            critic = None
            if critic_config is not None:
                encoder = abstract_model(critic_config, ("roberta",), dtype=dtype, param_dtype=jnp.float32,
                                         remat=c.model.remat, seed=c.seed)
                critic = run_parts.critic_module(c, encoder)
            return actor, critic

        actor, critic = nnx.eval_shape(build)
        self.actor_module = actor
        self.networks = run_parts.run_networks(c, self.mesh, actor, critic)
        self.batch = c.batch_size * c.grad_accum_steps
        self.max_prompt_length = run_parts.prompt_length(c, actor.policy.config)
        self.max_critic_length = (run_parts.critic_length(c, critic.encoder.config) if critic is not None
                                  else c.model.max_critic_length)
        self.action_length = next_power_of_two(c.sampling.max_new_tokens)  # the pipeline's action bucket
        # The critic's action rows: the utterance's bucket, or an observation's with the utterance after it.
        self.critic_action_length = (self.max_critic_length if c.model.critic_action == "in_context"
                                     else self.action_length)
        vocab = actor.policy.config.vocab_size
        self.decoder = Decoder(actor.policy, lambda sampling: np.zeros(vocab, bool), pad_id=0, mesh=self.host_mesh,
                               max_prompt_length=self.max_prompt_length, matmul_precision=c.model.matmul_precision)
