"""The keys of a run's loop and shared parts, with their defaults and checks: the top level's
(:class:`LoopConfig`), ``config.model`` (:class:`ModelConfig`, :class:`archer_jax.models.lora.LoRAConfig`
for ``config.model.lora``), ``config.env`` (:class:`EnvConfig`; ``env.options`` is free-form,
checked by the env's registry entry) and ``config.rollout`` (:class:`RolloutConfig`).

Each ``__post_init__`` raises ValueError naming its key; :func:`archer_jax.config.validate`
reports it as the one-line ``config.<group>.<key>: ...``. The agents' keys are their ``Config``s
(:mod:`archer_jax.agents`).
"""

from __future__ import annotations

import dataclasses
import math

from archer_jax.learners.critic import EMBEDDINGS
from archer_jax.models.layers import REMAT_POLICIES
from archer_jax.models.lora import LoRAConfig
from archer_jax.runtime.precision import DTYPES, MATMUL_PRECISIONS
from archer_jax.sampling.prompts import PROMPT_FORMATS


def _choice(config, name: str, allowed) -> None:
    value = getattr(config, name)
    if value not in allowed:
        raise ValueError(f"{name}: unknown value {value!r}; known: {', '.join(allowed)}")


def _at_least(config, *names: str, zero: bool = False) -> None:
    """Each of ``names`` is > 0 (``zero``: >= 0) and finite."""
    for name in names:
        value = getattr(config, name)
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            raise ValueError(f"{name}: must be {'>= 0' if zero else '> 0'}, got {value}")


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The top level's own keys: the loop (ArCHer's official online hyperparameters) and its bookkeeping."""

    agent: str = "archer"  # a name in archer_jax.agents (checked against the registry by the config)
    seed: int = 0
    # Offline-to-online (archer_jax/run/warm_start.py): start from the policy (and critic) of the newest
    # checkpoint of this run directory, e.g. an offline ArCHer run's. "" = start as configured.
    init_from: str = ""
    iterations: int = 2000
    rollout_size: int = 128  # dialogues collected per iteration
    # Rollouts per game: rollout_size / k games, each played k times in a row (GRPO's groups; 1 =
    # every dialogue its own game).
    rollout_group_size: int = 1
    eval_size: int = 32  # greedy dialogues per evaluation
    capacity: int = 100_000  # replay buffer transitions
    # An optimizer step takes batch_size x grad_accum_steps transitions (the official code's two
    # keys, 8 x 32); the learner cuts them into micro-batches by memory: learner.micro_batch_size.
    batch_size: int = 8
    grad_accum_steps: int = 32
    eval_freq: int = 25  # iterations between greedy evaluations (0 = only before and at the end)
    # Also play the evaluation games sampled as the rollouts are (eval_sampled/* metrics): a small
    # policy's greedy utterance can loop where its samples do not, so the two can disagree.
    eval_sampled: bool = False
    save_freq: int = 25  # iterations between checkpoints (the last iteration is always saved; 0 = only it)
    keep_checkpoints: int = 2
    max_nonfinite_steps: int = 10  # consecutive skipped (non-finite) steps that stop the run
    use_wandb: bool = False
    wandb_project: str = "archer_jax"
    # JAX's persistent compilation cache: a second run (another seed, a resume) loads its compiled
    # programs instead of compiling them again. "" = off. JAX_COMPILATION_CACHE_DIR, when set, wins.
    compilation_cache: str = "~/.cache/archer_jax/xla"

    def __post_init__(self):
        _at_least(self, "iterations", "rollout_size", "eval_size", "capacity", "batch_size", "grad_accum_steps",
                  "keep_checkpoints", "max_nonfinite_steps")
        _at_least(self, "eval_freq", "save_freq", "seed", zero=True)
        step = self.batch_size * self.grad_accum_steps
        if self.capacity < step:  # it would train on the same few transitions, over and over
            raise ValueError(f"capacity: {self.capacity} transitions hold less than one optimizer step's batch "
                             f"(batch_size {self.batch_size} x grad_accum_steps {self.grad_accum_steps} = {step})")
        k = self.rollout_group_size
        if k < 1 or self.rollout_size % k:
            raise ValueError(f"rollout_group_size: must be >= 1 and divide rollout_size ({self.rollout_size}), got {k}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """``config.model``: the networks and how they run."""

    policy: str = "gpt2"  # hub name, HF-format directory, or tiny:gpt2 / tiny:llama
    critic: str = "roberta-base"  # hub name, HF-format directory, or tiny:roberta
    critic_embedding: str = "pooler"  # pooler | first_token
    # What the critic's encoder reads as an action: "utterance" (the utterance alone, encoded apart
    # from the observation: the official critic) or "in_context" (the dialogue so far followed by the
    # utterance, one text: its encoder can then compare the utterance with the turns before it).
    critic_action: str = "utterance"
    # The official ArCHer critic to start from: the critic_init.safetensors that
    # `python -m archer_jax.import_official trainer.pt` writes (its encoder, heads and target). "" = none.
    critic_init: str = ""
    # The critic's parameters over the mesh: "mesh" (split by their logical axes, as the policy's)
    # or "replicated" (a whole copy on each device, the batch still split: a small critic beside
    # a large FSDP-sharded policy then needs no parameter gathers).
    critic_sharding: str = "mesh"
    dtype: str = "auto"  # compute dtype: auto (bfloat16 on GPU/TPU, float32 on CPU) | float32 | bfloat16
    matmul_precision: str = "default"  # float32 matmuls: default | high | highest (archer_jax/runtime/precision.py)
    # Activation checkpointing in training passes, per transformer block: none | dots (keep the
    # matmul outputs, recompute the rest) | full (keep each block's input only).
    remat: str = "none"
    max_prompt_length: int = 512  # policy prompt tokens (left-truncated)
    max_critic_length: int = 512  # critic tokens per text (left-truncated)
    # The policy's weights as loaded: float32, or bfloat16 (half the memory; for a LoRA policy,
    # whose trained adapters stay float32 master copies).
    param_dtype: str = "float32"
    # How observations become the policy's prompts and its utterances the env's actions
    # (archer_jax/sampling/prompts.py): plain (the dialogue itself) | mistral_20q (the official archer_llm's).
    prompt_format: str = "plain"
    lora: LoRAConfig = dataclasses.field(default_factory=LoRAConfig, metadata={"group": True})  # config.model.lora

    def __post_init__(self):
        _choice(self, "critic_embedding", EMBEDDINGS)
        _choice(self, "critic_action", ("utterance", "in_context"))
        _choice(self, "dtype", DTYPES)
        _choice(self, "matmul_precision", MATMUL_PRECISIONS)
        _choice(self, "remat", tuple(REMAT_POLICIES))
        _choice(self, "param_dtype", ("float32", "bfloat16"))
        _choice(self, "critic_sharding", ("mesh", "replicated"))
        _choice(self, "prompt_format", tuple(PROMPT_FORMATS))
        _at_least(self, "max_prompt_length", "max_critic_length")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """``config.env`` (its free-form ``options`` apart): which env, and how its pool runs."""

    name: str = "twenty_questions"  # a name in archer_jax.envs.registry (or "package.module:factory")
    max_turns: int = 20
    # What reaching the turn limit is: "game" (the env's rule: every env here ends its games there,
    # as the official code does; its last transition is terminal), "end" (terminal, whatever the env
    # says; also a cut at max_turns of an env with no limit of its own) or "cut" (the game would go
    # on: the TD target bootstraps from V(s')). A crashed worker's episode is always a cut.
    turn_limit: str = "game"
    workers: int = 0  # worker processes for the env pool; 0 = in-process
    timeout_s: float = 120.0  # a worker silent this long is restarted
    # Keyword arguments for the env (e.g. game_path), free-form: checked by the env's registry entry.
    options: dict = dataclasses.field(default_factory=dict, metadata={"group": True})

    def __post_init__(self):
        _choice(self, "turn_limit", TURN_LIMITS)
        _at_least(self, "max_turns", "timeout_s")
        _at_least(self, "workers", zero=True)


TURN_LIMITS = ("game", "end", "cut")


STALENESS = (0, 1)


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """``config.rollout``: how the training dialogues are collected.

    ``staleness`` 0 collects each iteration's dialogues, then learns from them. 1 collects the
    dialogues of iteration k+1 with the policy as it stood after iteration k-1's update while
    iteration k's learner steps run, so env steps, tokenization and replay inserts overlap device
    work; the results depend on the setting, never on timing. ``slots`` is how many dialogues are
    played at once: 0 plays all of an iteration's dialogues side by side; n keeps n running, and a
    slot whose dialogue ends takes the iteration's next game (continuous batching). A dialogue
    samples the same whatever slot it lands in, so ``slots`` changes speed, not results.
    """

    staleness: int = 0
    slots: int = 0

    def __post_init__(self):
        if self.staleness not in STALENESS:
            raise ValueError(f"staleness: must be 0 (serial) or 1 (one iteration ahead), got {self.staleness}")
        _at_least(self, "slots", zero=True)
