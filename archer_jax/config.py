"""The training config: every key with its default, grouped by the code that reads it, and its
validation before anything is built.

Config files (``configs/*.py``) start from :func:`base_config` and change values, never keys::

    def get_config(preset=""):
        c = config.base_config()
        c.env.name = "guess_my_city"
        return c

Groups: the top level is the training loop's (``train.py``) and the agents' step counts;
``c.model`` builds the networks; ``c.env`` the environments; ``c.sampling`` is
:class:`~archer_jax.sampling.SamplingParams`; ``c.learner`` is
:class:`~archer_jax.learners.learner_config.LearnerConfig` with offline ArCHer's
:class:`~archer_jax.learners.offline_archer.IQLConfig`; ``c.ppo`` is
:class:`~archer_jax.learners.ppo.PPOConfig`; ``c.sft`` the warm start; ``c.mesh`` the device mesh.
The groups with a dataclass, and each agent's top-level keys (its ``Config`` in
:mod:`archer_jax.agents`), take their defaults from those dataclasses, which also hold their checks:
:func:`validate` constructs them and reports their ValueError as the one-line ConfigError. The defaults are the paper's online setting
for Twenty Questions; ``docs/algorithms.md`` lists each key beside its name in the official code.
Keys renamed since 0.1 are in :data:`RENAMED`: a config or command line that uses one fails
with one line naming the new key.

:data:`KEY_DOCS` holds one line of documentation per key (``--help`` prints them with the defaults).

:func:`validate` checks a finished config (after ``--config.x=...`` overrides) and raises
:class:`~archer_jax.errors.ConfigError` with one line naming the key: unknown keys (with the
closest known one), wrong types, unknown agent/env/loss names, values out of range, a policy or
critic directory that does not exist. :mod:`archer_jax.run.preflight` adds the checks that need the
workdir, the devices or the models' ``config.json``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
from pathlib import Path

import ml_collections

from archer_jax import agents
from archer_jax.agents import archer as archer_agent
from archer_jax.agents import chai as chai_agent
from archer_jax.agents import filtered_bc as filtered_bc_agent
from archer_jax.agents import ppo as ppo_agent
from archer_jax.data.dataset_config import DatasetConfig
from archer_jax.data.offline_replay import DATASET_ENVS
from archer_jax.envs import registry as envs
from archer_jax.envs.experts import EXPERTS
from archer_jax.errors import ConfigError
from archer_jax.handover import checkpoint_directory
from archer_jax.learners.critic import EMBEDDINGS
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.micro_batching import AUTO, parse_micro_batch_size
from archer_jax.learners.offline_archer import IQLConfig
from archer_jax.learners.ppo import PPOConfig
from archer_jax.models import hub
from archer_jax.models.layers import REMAT_POLICIES
from archer_jax import prompts as prompt_formats
from archer_jax.models.tiny import CAUSAL_KINDS, TINY_PREFIX
from archer_jax.precision import DTYPES, MATMUL_PRECISIONS
from archer_jax.sampling import SamplingParams
from archer_jax.sft import SFTConfig
from archer_jax.sharding import MeshConfig

FREE_FORM = ("env.options",)  # keyword arguments for the env: checked by the env's registry entry
# Every integer key (counts, sizes, seeds) is below this: 32-bit indices and seeds, and no run of
# 2**31 iterations, transitions or tokens is meant.
MAX_INT = 2**31

# Keys of archer_jax 0.1 (a flat config) and where they are now.
RENAMED = {
    "env_options": "env.options", "env_workers": "env.workers", "env_timeout_s": "env.timeout_s",
    "max_turns": "env.max_turns", "policy": "model.policy", "critic": "model.critic",
    "critic_embedding": "model.critic_embedding", "dtype": "model.dtype",
    "max_prompt_length": "model.max_prompt_length", "max_critic_length": "model.max_critic_length",
    "epochs": "critic_steps (bc_steps for filtered_bc)", "actor_epochs": "actor_steps",
    "critic_lr": "learner.critic_lr", "lm_lr": "learner.actor_lr", "gamma": "learner.gamma", "tau": "learner.tau",
    "max_grad_norm": "learner.max_grad_norm", "actor_loss": "learner.actor_loss",
    "max_new_tokens": "sampling.max_new_tokens", "temperature": "sampling.temperature", "top_k": "sampling.top_k",
    "top_p": "sampling.top_p", "sft_steps": "sft.steps", "sft_lr": "sft.lr", "sft_batch_size": "sft.batch_size",
    "sft_data": "sft.data", "sft_dialogues": "sft.dialogues", "sft_experts": "sft.experts", "sft_seed": "sft.seed",
}


# The config groups built from dataclasses: (group, its dataclasses, the fields that are no keys).
# validate() constructs these for every run; the offline agents' Config holds the offline group.
GROUPS = (("learner", (LearnerConfig, IQLConfig), ()), ("ppo", (PPOConfig,), ("temperature",)),
          ("sampling", (SamplingParams,), ("greedy", "stop_strings", "stop_at_eos")), ("sft", (SFTConfig,), ()),
          ("mesh", (MeshConfig,), ()))
AGENT_GROUPS = (("offline", (DatasetConfig,), ()),)
# The agents' top-level keys (step counts and the like), from their Config dataclasses.
AGENT_KEYS = (archer_agent.Config, chai_agent.Config, filtered_bc_agent.Config, ppo_agent.Config)


def dataclass_defaults(cls: type, skip: tuple[str, ...] = ()) -> dict:
    """``cls``'s fields and defaults, without its key groups (fields with ``group`` metadata)."""
    instance = cls()
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(cls)
            if not f.metadata.get("group") and f.name not in skip}


def _group(name: str) -> ml_collections.ConfigDict:
    """The config group ``name`` of :data:`GROUPS`, from its dataclasses' defaults."""
    classes, skip = next((classes, skip) for group, classes, skip in GROUPS + AGENT_GROUPS if group == name)
    return ml_collections.ConfigDict({k: v for cls in classes for k, v in dataclass_defaults(cls, skip).items()})


def base_config() -> ml_collections.ConfigDict:
    """Every config key with the paper's online defaults for Twenty Questions."""
    c = ml_collections.ConfigDict()
    c.agent = "archer"  # a name in archer_jax.agents: archer | chai | filtered_bc | ppo | offline_archer | offline_(filtered_)bc
    c.seed = 0
    # Offline-to-online (archer_jax/handover.py): start from the policy (and critic) of the newest
    # checkpoint of this run directory, e.g. an offline ArCHer run's. "" = start as configured.
    c.init_from = ""

    # The loop (ArCHer's official online hyperparameters).
    c.iterations = 2000
    c.rollout_size = 128  # dialogues collected per iteration
    c.eval_size = 32  # greedy dialogues per evaluation
    c.capacity = 100_000  # replay buffer transitions
    # An optimizer step takes batch_size x grad_accum_steps transitions (the official code's two
    # keys, 8 x 32); the learner cuts them into micro-batches by memory: learner.micro_batch_size.
    c.batch_size = 8
    c.grad_accum_steps = 32
    # The agents' keys: critic_steps, actor_steps, warmup_iter (ArCHer's), chai_samples (CHAI's),
    # bc_steps, filtered_bc_fraction (filtered BC's), rollout_group_size (GRPO's groups).
    for cls in AGENT_KEYS:
        c.update(dataclass_defaults(cls))

    # Bookkeeping.
    c.eval_freq = 25  # iterations between greedy evaluations (0 = only before and at the end)
    c.save_freq = 25  # iterations between checkpoints (the last iteration is always saved)
    c.keep_checkpoints = 2
    c.max_nonfinite_steps = 10  # consecutive skipped (non-finite) steps that stop the run
    c.use_wandb = False
    c.wandb_project = "archer_jax"
    # JAX's persistent compilation cache: a second run (another seed, a resume) loads its compiled
    # programs instead of compiling them again. "" = off. JAX_COMPILATION_CACHE_DIR, when set, wins.
    c.compilation_cache = "~/.cache/archer_jax/xla"

    c.model = ml_collections.ConfigDict(dict(
        policy="gpt2",  # hub name, HF-format directory, or tiny:gpt2 / tiny:llama
        critic="roberta-base",  # hub name, HF-format directory, or tiny:roberta
        critic_embedding="pooler",  # pooler | first_token
        # The official ArCHer critic to start from: the critic_init.safetensors that
        # `python -m archer_jax.import_official trainer.pt` writes (its encoder, heads and target). "" = none.
        critic_init="",
        # The critic's parameters over the mesh: "mesh" (split by their logical axes, as the policy's)
        # or "replicated" (a whole copy on each device, the batch still split: a small critic beside
        # a large FSDP-sharded policy then needs no parameter gathers).
        critic_sharding="mesh",
        dtype="auto",  # compute dtype: auto (bfloat16 on GPU/TPU, float32 on CPU) | float32 | bfloat16
        matmul_precision="default",  # float32 matmuls: default | high | highest (archer_jax/precision.py)
        # Activation checkpointing in training passes, per transformer block: none | dots (keep the
        # matmul outputs, recompute the rest) | full (keep each block's input only).
        remat="none",
        max_prompt_length=512,  # policy prompt tokens (left-truncated)
        max_critic_length=512,  # critic tokens per text (left-truncated)
        # The policy's weights as loaded: float32, or bfloat16 (half the memory; for a LoRA policy,
        # whose trained adapters stay float32 master copies).
        param_dtype="float32",
        # How observations become the policy's prompts and its utterances the env's actions
        # (archer_jax/prompts.py): plain (the dialogue itself) | mistral_20q (the official archer_llm's).
        prompt_format="plain",
        # LoRA on the policy (archer_jax/models/lora.py): rank 0 = off (every weight trains).
        lora=ml_collections.ConfigDict(dict(rank=0, alpha=32.0, dropout=0.0, targets="q_proj,k_proj,v_proj,o_proj")),
    ))
    c.env = ml_collections.ConfigDict(dict(
        name="twenty_questions",  # a name in archer_jax.envs.registry (or "package.module:factory")
        options=ml_collections.ConfigDict(),  # extra keyword arguments for the env (e.g. game_path)
        max_turns=20,
        workers=0,  # worker processes for the env pool; 0 = in-process
        timeout_s=120.0,  # a worker silent this long is restarted
    ))
    c.sampling = _group("sampling")  # SamplingParams' keys (top_k 0 = off)
    c.learner = _group("learner")  # LearnerConfig's and IQLConfig's keys
    # "auto" or a number: a reference that takes either type.
    c.learner.micro_batch_size = ml_collections.FieldReference(c.learner.micro_batch_size, field_type=object)
    # The offline agents' dataset (archer_jax/data): dialogue files in the env's format (a directory
    # or one .json: LMRL-Gym's for 20Q, the official one for Guess My City), built once with TFDS
    # into data_dir (default: the workdir's). Empty dataset: generated from the embedded env's
    # scripted experts in policy_mix (kinds of archer_jax.envs.experts.EXPERTS, weights normalised).
    c.offline = _group("offline")  # DatasetConfig's keys
    # Token-level PPO (agent "ppo", archer_jax/learners/ppo.py) and its advantage estimator
    # (archer_jax/learners/ppo_estimators.py). The paper's Table 2 names PPO's epochs, GAE lambda and
    # clip range; these defaults are PPO's usual values (Schulman et al. 2017) and RAGEN's for its
    # archer estimator (high_level_gamma 0.95, alpha 0.1).
    c.ppo = _group("ppo")  # PPOConfig's keys
    c.sft = _group("sft")  # SFTConfig's keys
    c.mesh = _group("mesh")  # MeshConfig's keys (-1 = all remaining devices)
    return c


def offline_config() -> ml_collections.ConfigDict:
    """OfflineArcher's setting (submit_OfflineArcher_TwentyQuestions.sh) on top of :func:`base_config`:
    offline ArCHer with the AWR actor, batches of 32 x 4, actor_lr 1e-4, critic_lr 1e-5, γ 0.99,
    Polyak 0.05, expectile 0.9, β 1.0, no critic warm-up, 64 evaluation dialogues every 250 batches."""
    c = base_config()
    c.agent, c.learner.actor_loss = "offline_archer", "awr"
    c.batch_size, c.grad_accum_steps = 32, 4
    c.critic_steps = c.actor_steps = c.bc_steps = 62  # 250 batches of 32, 4 accumulated per step: one evaluation's worth
    c.warmup_iter = 0
    c.iterations, c.eval_freq, c.save_freq, c.eval_size = 2000, 1, 5, 64
    c.learner.update(dict(actor_lr=1e-4, critic_lr=1e-5, gamma=0.99, tau=0.05, expectile=0.9, awr_beta=1.0))
    c.offline.generate_episodes = 100_000
    return c


# One line of documentation per key of base_config (``--help`` prints them with the defaults; a
# test checks that every key has one). The longer story is in docs/algorithms.md, section 10.
KEY_DOCS: dict[str, str] = {
    "agent": "the algorithm: archer | chai | filtered_bc | ppo | offline_archer | offline_bc | offline_filtered_bc (archer_jax.agents)",
    "init_from": "a run directory whose newest checkpoint's policy (and critic) this run starts from (\"\" = none)",
    "seed": "the run's seed: model initialisation, sampling, env games, replay draws",
    "iterations": "outer-loop iterations (roll out, store, learn)",
    "rollout_size": "dialogues collected per iteration",
    "eval_size": "greedy dialogues per evaluation (the same games every time)",
    "capacity": "replay buffer size in transitions",
    "batch_size": "transitions per optimizer step, times grad_accum_steps (the official code's micro-batch)",
    "grad_accum_steps": "with batch_size: batch_size x grad_accum_steps transitions per optimizer step",
    "critic_steps": "critic optimizer steps per iteration",
    "actor_steps": "actor optimizer steps per iteration, after warmup_iter",
    "bc_steps": "filtered BC: optimizer steps per iteration",
    "warmup_iter": "first iterations that train the critic only",
    "chai_samples": "CHAI: candidate actions per state",
    "filtered_bc_fraction": "filtered BC: top fraction of trajectories kept, in (0, 1]",
    "eval_freq": "iterations between greedy evaluations (0 = only before training and at the end)",
    "save_freq": "iterations between checkpoints (the last iteration is always saved)",
    "keep_checkpoints": "checkpoints kept in workdir/checkpoints (older ones are deleted)",
    "max_nonfinite_steps": "consecutive skipped (non-finite) optimizer steps that stop the run",
    "use_wandb": "also log metrics to Weights & Biases",
    "wandb_project": "the Weights & Biases project (with use_wandb)",
    "compilation_cache": "JAX's persistent compilation cache directory (\"\" = off; JAX_COMPILATION_CACHE_DIR wins)",
    "model.policy": "the policy: a causal LM (GPT-2, Llama, Mistral, Qwen2) as a hub name, an HF-format directory, "
                    "or tiny:gpt2 / tiny:llama (built offline)",
    "model.critic": "the critic's encoder: a hub name, an HF-format directory, or tiny:roberta (built offline)",
    "model.critic_embedding": "the critic's text embedding: pooler | first_token",
    "model.critic_init": "an official critic to start from: critic_init.safetensors from archer_jax.import_official (\"\" = none)",
    "model.dtype": "compute dtype: auto (bfloat16 on GPU/TPU, float32 on CPU) | float32 | bfloat16",
    "model.matmul_precision": "float32 matmul precision: default | high | highest (archer_jax/precision.py)",
    "model.remat": "activation checkpointing per block: none | dots (keep matmul outputs) | full (keep block inputs)",
    "model.max_prompt_length": "policy prompt tokens kept (from the end)",
    "model.max_critic_length": "critic tokens kept per text (from the end)",
    "model.prompt_format": "observations -> prompts, utterances -> actions: plain | mistral_20q (archer_jax/prompts.py)",
    "model.critic_sharding": "the critic's parameters: mesh (split like the policy's) | replicated (whole on each device)",
    "model.param_dtype": "the policy's loaded weights: float32 | bfloat16 (LoRA adapters stay float32)",
    "model.lora.rank": "LoRA rank on the policy's projections (0 = off: every weight trains)",
    "model.lora.alpha": "LoRA scale numerator: adapters add (alpha / rank) * x A B",
    "model.lora.dropout": "LoRA dropout on the adapters' input in training steps (PEFT's lora_dropout)",
    "model.lora.targets": "comma-separated projections (PEFT names: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)",
    "env.name": "the env: a name in archer_jax.envs.registry, or package.module:factory",
    "env.options": "extra keyword arguments for the env: --config.env.options.oracle=t5:DIR, or a dict "
                   "--config.env.options='{\"oracle\": \"t5:DIR\"}' (detective: game_path)",
    "env.max_turns": "turn limit per dialogue (a cut there is a truncation, not an end)",
    "env.workers": "env worker processes (0 = in this process)",
    "env.timeout_s": "seconds of silence after which an env worker is restarted",
    "sampling.max_new_tokens": "token limit of one utterance (must leave room for a prompt in the policy's positions)",
    "sampling.temperature": "rollout sampling temperature (evaluation is greedy)",
    "sampling.top_k": "sample from the k likeliest tokens only (0 = off)",
    "sampling.top_p": "nucleus sampling: the smallest set of tokens with this much mass, in (0, 1] (1 = off)",
    "learner.gamma": "discount per turn, in [0, 1]",
    "learner.tau": "Polyak rate of the target critic, in (0, 1] (0 would never move the target)",
    "learner.critic_lr": "Adam learning rate of the critic",
    "learner.actor_lr": "Adam learning rate of the policy",
    "learner.max_grad_norm": "clip each network's gradient to this global norm (> 0; always on)",
    "learner.actor_loss": "the policy-gradient loss: a name in archer_jax.learners.actor_losses",
    "learner.micro_batch_size": "transitions per scanned micro-batch: auto (largest that fits) or a number that cuts each step evenly",
    "learner.expectile": "offline ArCHer: V's expectile of Q over the data, in (0, 1) (0.9 IQL; 0.5 the SARSA variant)",
    "learner.iql_v_target": "offline ArCHer: V's target: min (min of the target Qs) | paired (each V_i its own target Q_i)",
    "learner.awr_beta": "offline ArCHer's AWR actor: weights exp(awr_beta * A)",
    "learner.awr_clip": "offline ArCHer's AWR actor: the weights' upper clip (> 0)",
    "offline.dataset": "offline agents: a directory of dialogue .json files or one file (\"\" = generate from the experts)",
    "offline.data_dir": "offline agents: where TFDS builds the dataset (\"\" = workdir/offline/tfds)",
    "offline.split": "offline agents: the dataset split trained on (train | eval)",
    "offline.generate_episodes": "offline agents without a dataset: expert dialogues generated",
    "offline.policy_mix": "offline agents without a dataset: expert kinds and weights, e.g. optimal:0.2,redundant:0.3,random:0.5",
    "offline.generate_seed": "offline agents without a dataset: the generator's seed (the same data for every run seed)",
    "rollout_group_size": "rollouts per game: rollout_size / k games each played k times (grpo's groups; 1 = off)",
    "ppo.adv_estimator": "PPO's advantage estimator: gae | grpo | archer_ragen | archer_hierarchical (archer_jax.learners.ppo_estimators)",
    "ppo.epochs": "PPO: passes over each iteration's rollouts (minibatches of batch_size x grad_accum_steps)",
    "ppo.clip": "PPO: the policy ratio's clip range epsilon, in (0, 1)",
    "ppo.value_clip": "PPO: the value loss's clip range around the rollout's values (> 0)",
    "ppo.vf_coef": "PPO: the value loss's weight",
    "ppo.kl_coef": "PPO: the weight of the KL penalty to the policy RL started from (0 = off)",
    "ppo.gamma": "PPO: discount per token of gae and archer_ragen, in [0, 1]",
    "ppo.lam": "PPO: GAE's lambda, in [0, 1] (every estimator with a value head)",
    "ppo.high_level_gamma": "PPO archer_ragen: RAGEN's turn-level discount, in [0, 1]",
    "ppo.archer_alpha": "PPO archer_ragen: RAGEN's weight of the turn-level values in the mixed baseline, in [0, 1]",
    "ppo.critic_baseline": "PPO archer_hierarchical: the turn level is the critic's Q(s, a) - V(s), the token value head learns the rest (a baseline that starts at the critic's level)",
    "ppo.whiten": "PPO: whiten the advantages over the batch's tokens (gae, archer_hierarchical; archer_ragen always does)",
    "ppo.value_head": "PPO: separate (a value model of its own, at critic_lr) | shared (a head whose loss trains the policy's layers too) | detached (a head on stopped hidden states)",
    "sft.steps": "SFT warm-start steps before RL (0 = no warm start)",
    "sft.lr": "SFT Adam learning rate",
    "sft.batch_size": "SFT pairs per step",
    "sft.data": "SFT demonstrations: experts | walkthrough (detective) | a .jsonl of {observation, action} lines",
    "sft.dialogues": "expert dialogues played for the SFT data (sft.data=experts)",
    "sft.experts": "comma-separated expert kinds (archer_jax.envs.experts.EXPERTS), taken in turn",
    "sft.seed": "the SFT seed (the same warm start for every run seed)",
    "mesh.data": "devices on the data axis (-1 = all remaining devices)",
    "mesh.fsdp": "devices on the fsdp axis (batch and parameter shards; -1 = all remaining)",
    "mesh.tensor": "devices on the tensor axis (heads, MLP and vocabulary columns; -1 = all remaining)",
}


PRESETS = ("", "tiny", "micro")  # every config file's: its official setting, and two small ones

# What every config file's "tiny" preset sets: tiny models built offline (no download,
# archer_jax.models.build_tiny) and counts for a laptop CPU. Each file adds its env's own counts.
TINY = {
    "model.policy": "tiny:gpt2", "model.critic": "tiny:roberta", "capacity": 10_000, "batch_size": 32,
    "grad_accum_steps": 1, "critic_steps": 10, "actor_steps": 3, "bc_steps": 10, "warmup_iter": 5,
    "learner.critic_lr": 1e-4,
    # A 64-wide policy puts much mass on junk tokens: sample from its cooler, nucleus-cut
    # distribution (the paper's GPT-2 samples at temperature 1).
    "sampling.temperature": 0.7, "sampling.top_p": 0.9,
    "model.max_prompt_length": 256, "model.max_critic_length": 256,  # observations keep their end
    "eval_freq": 5, "save_freq": 10,
}
# What every file's "micro" preset sets on top of its "tiny": seconds of work, for tests.
MICRO = {
    "iterations": 2, "batch_size": 8, "critic_steps": 2, "actor_steps": 1, "bc_steps": 2, "warmup_iter": 1,
    "eval_freq": 1, "save_freq": 1,
}


def file_config(path: str | Path, preset: str = "") -> ml_collections.ConfigDict:
    """``get_config(preset)`` of the config file at ``path``, loaded by path (config file names
    such as ``20q.py`` are no module names): how one config file builds on another."""
    spec = importlib.util.spec_from_file_location(f"archer_jax_config_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(preset)


def with_preset(c: ml_collections.ConfigDict, preset: str, config_file: str, *, tiny: dict | None = None,
                micro: dict | None = None) -> ml_collections.ConfigDict:
    """``c`` (a config file's official setting) under ``preset``: "" leaves it as it is; "tiny" sets
    :data:`TINY`, then the file's own ``tiny`` keys (dotted names); "micro" sets those, then
    :data:`MICRO` and the file's ``micro`` keys. An unknown preset is a ValueError naming the file."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for {config_file}; known: '' (official), 'tiny', 'micro'")
    steps = {"": (), "tiny": (TINY, tiny), "micro": (TINY, tiny, MICRO, micro)}[preset]
    for values in steps:
        c.update_from_flattened_dict(values or {})
    return c


def _flatten(c: ml_collections.ConfigDict, prefix: str = "") -> dict:
    """``{"group.key": value}`` for every key (the free-form groups of :data:`FREE_FORM` as one)."""
    out = {}
    for key, value in c.items():
        name = f"{prefix}{key}"
        if isinstance(value, ml_collections.ConfigDict) and name not in FREE_FORM:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _type_ok(value, default) -> bool:
    if default == AUTO:  # "auto" or a number
        return isinstance(value, (str, int)) and not isinstance(value, bool)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, ml_collections.ConfigDict):
        return isinstance(value, (ml_collections.ConfigDict, dict))
    return isinstance(value, type(default))


def flat_defaults() -> dict:
    """Every config key (``"learner.critic_lr"``) with its default, sorted by key."""
    return _flatten(base_config())


def suggest(key: str) -> str | None:
    """The known key closest to a mistyped ``key`` (``"learner.critic_lrr"`` -> ``"learner.critic_lr"``;
    ``"critic_lrr"`` -> ``"learner.critic_lr"``), or None."""
    keys = list(flat_defaults())
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
    if close:
        return close[0]
    leaves = {k.rsplit(".", 1)[-1]: k for k in keys}
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(leaves), n=1, cutoff=0.75)
    return leaves[close[0]] if close else None


def unknown_key(key: str) -> str:
    """The one-line message for an unknown config key, with the closest known key if there is one."""
    near = suggest(key)
    hint = f"did you mean {near}?" if near else "every key is listed by --help and in archer_jax/config.py"
    return f"unknown config key; {hint}"


def renamed(key: str) -> str | None:
    """The one-line error for a key of the old flat config, or None."""
    if key in RENAMED:
        return f"config.{key}: renamed to config.{RENAMED[key]} (docs/algorithms.md lists every key)"
    return None


def _check_lora(lora: ml_collections.ConfigDict) -> None:
    if lora.rank < 0:
        raise ConfigError(f"config.model.lora.rank: must be >= 0 (0 = off), got {lora.rank}")
    if not lora.rank:
        return
    if not (math.isfinite(lora.alpha) and lora.alpha > 0):
        raise ConfigError(f"config.model.lora.alpha: must be > 0, got {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        raise ConfigError(f"config.model.lora.dropout: must be in [0, 1), got {lora.dropout}")
    if not [t for t in lora.targets.split(",") if t.strip()]:
        raise ConfigError("config.model.lora.targets: name at least one projection (e.g. q_proj,v_proj)")


def _check_model(key: str, name: str, kinds: tuple[str, ...]) -> None:
    """A tiny model of a kind in ``kinds``, an existing HF-format directory, or (offline) a cached hub name.

    A name that exists on disk is a local directory, whatever it looks like (``models/mygpt2``);
    only a name that is not on disk is looked up on the hub.
    """
    if name.startswith(TINY_PREFIX):
        if name[len(TINY_PREFIX):] not in kinds:
            allowed = " or ".join(repr(TINY_PREFIX + kind) for kind in kinds)
            raise ConfigError(f"config.{key}: {name!r} is not a tiny model for this role; use {allowed}")
        return
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"config.{key}: {name} is a file, not a model directory")
        if not (path / "config.json").is_file():
            raise ConfigError(f"config.{key}: {name} has no config.json (not a Hugging Face model directory)")
    elif hub.looks_like_path(name):
        raise ConfigError(f"config.{key}: model directory {name} does not exist")
    elif hub.is_offline():  # a hub name must already be cached (online, the loader downloads it)
        try:
            hub.resolve(name)
        except hub.ModelLoadError as e:
            raise ConfigError(f"config.{key}: {e}") from None


def _check_keys(config: ml_collections.ConfigDict) -> dict:
    """The flattened config, after checking its keys and their types against :func:`base_config`."""
    base, given = _flatten(base_config()), _flatten(config)
    for key in given:
        if key not in base:
            raise ConfigError(renamed(key) or f"config.{key}: {unknown_key(key)}")
    for key, default in base.items():
        if key not in given:
            raise ConfigError(f"config.{key}: missing (configs start from archer_jax.config.base_config())")
        if not _type_ok(given[key], default):
            raise ConfigError(
                f"config.{key}: expected {type(default).__name__}, got {type(given[key]).__name__} {given[key]!r}"
            )
    return given


def _check_micro_batch_size(c: ml_collections.ConfigDict) -> None:
    """``learner.micro_batch_size``: "auto", or a number that cuts the step batches evenly."""
    key = "config.learner.micro_batch_size"
    size = parse_micro_batch_size(c.learner.micro_batch_size)  # a valid value (LearnerConfig checked it)
    batches = {"batch_size x grad_accum_steps": c.batch_size * c.grad_accum_steps}
    if c.sft.steps:
        batches["sft.batch_size"] = c.sft.batch_size
    for name, batch in batches.items():
        if size is not None and batch % min(size, batch):
            raise ConfigError(f"{key}: {size} does not cut the step batch of {batch} transitions ({name}) evenly")


def _check_data(c: ml_collections.ConfigDict) -> None:
    """An agent that learns from a dataset has one for the env (the ``offline`` keys are its
    config's, :class:`~archer_jax.data.dataset_config.DatasetConfig`), and the offline-to-online
    handover's keys."""
    if not agents.get(c.agent).learns_from_rollouts:
        if c.env.name not in DATASET_ENVS:
            raise ConfigError(f"config.env.name: offline agents have datasets for {', '.join(DATASET_ENVS)}, not {c.env.name!r}")
    if c.init_from:
        if c.sft.steps:
            raise ConfigError("config.init_from: a run that starts from another run's networks takes no SFT warm start "
                              f"(sft.steps is {c.sft.steps}); set --config.sft.steps=0")
        checkpoint_directory(c.init_from)
    if c.model.critic_init:
        if c.init_from:
            raise ConfigError("config.model.critic_init: init_from already gives this run its critic; set one of them")
        if not Path(c.model.critic_init).expanduser().is_file():
            raise ConfigError(f"config.model.critic_init: {c.model.critic_init} does not exist (write it with "
                              "python -m archer_jax.import_official trainer.pt --out DIR)")


def _check_rollout_groups(c: ml_collections.ConfigDict, given: dict) -> None:
    """Rollout groups cut ``rollout_size``; PPO's separate value model needs the policy's weights to train."""
    k = given["rollout_group_size"]
    if k < 1 or c.rollout_size % k:
        raise ConfigError(f"config.rollout_group_size: must be >= 1 and divide rollout_size ({c.rollout_size}), got {k}")
    if c.agent == "ppo" and c.ppo.value_head == "separate" and c.model.lora.rank:
        raise ConfigError("config.ppo.value_head: 'separate' copies the policy's weights, which a LoRA policy "
                          f"(model.lora.rank {c.model.lora.rank}) keeps frozen; use shared or detached")


def _construct(c: ml_collections.ConfigDict):
    """Every config dataclass of ``c``: the groups' (:data:`GROUPS`), then the agent's ``Config``,
    which it returns; a ValueError becomes the ConfigError naming the key."""
    for name, classes, skip in GROUPS:
        for cls in classes:
            keys = set(dataclass_defaults(cls, skip))
            try:
                cls(**{k: v for k, v in c[name].items() if k in keys})
            except ValueError as e:
                raise ConfigError(f"config.{name}.{e}") from None
    try:
        return agents.get(c.agent).config_of(c)
    except ValueError as e:
        raise ConfigError(f"config.{e}") from None


def _check_int_bounds(given: dict) -> None:
    """Every integer key is below :data:`MAX_INT` (``iterations=10**21`` is no run)."""
    defaults = flat_defaults()
    for key, value in given.items():
        if isinstance(defaults[key], int) and not isinstance(defaults[key], bool) and value >= MAX_INT:
            raise ConfigError(f"config.{key}: must be < 2**31 ({MAX_INT}), got {value}")


def validate(config: ml_collections.ConfigDict) -> None:
    """Raises :class:`ConfigError` (one line, naming the key) unless ``config`` can be trained."""
    given = _check_keys(config)
    c = config

    def choice(key: str, allowed) -> None:
        if given[key] not in allowed:
            raise ConfigError(f"config.{key}: unknown value {given[key]!r}; known: {', '.join(allowed)}")

    def positive(*keys: str, zero: bool = False) -> None:
        for key in keys:
            value = given[key]
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
                raise ConfigError(f"config.{key}: must be {'>= 0' if zero else '> 0'}, got {value}")

    choice("agent", tuple(agents.AGENTS))
    choice("model.critic_embedding", EMBEDDINGS)
    choice("model.dtype", DTYPES)
    choice("model.matmul_precision", MATMUL_PRECISIONS)
    choice("model.remat", tuple(REMAT_POLICIES))
    choice("model.param_dtype", ("float32", "bfloat16"))
    choice("model.critic_sharding", ("mesh", "replicated"))
    choice("model.prompt_format", tuple(prompt_formats.PROMPT_FORMATS))
    envs.check(c.env.name)
    _check_lora(c.model.lora)
    positive("iterations", "rollout_size", "eval_size", "capacity", "batch_size", "grad_accum_steps",
             "keep_checkpoints", "max_nonfinite_steps", "model.max_prompt_length", "model.max_critic_length",
             "env.max_turns", "env.timeout_s")
    positive("eval_freq", "save_freq", "env.workers", "seed", "offline.generate_seed", zero=True)
    _check_int_bounds(given)
    agent_config = _construct(c)  # the dataclasses' checks: learner, ppo, sampling, the agent's keys
    _check_micro_batch_size(c)
    _check_data(c)
    _check_rollout_groups(c, given)
    _check_model("model.policy", c.model.policy, CAUSAL_KINDS)
    if agents.get(c.agent).networks_for(agent_config).critic:
        _check_model("model.critic", c.model.critic, ("roberta",))
    envs.check_options(c.env.name, c)
