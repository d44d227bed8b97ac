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
from archer_jax.runtime.config_keys import key
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

    agent: str = key(
        "archer", "the algorithm: archer | chai | filtered_bc | ppo | offline_archer | offline_bc | "
        "offline_filtered_bc (archer_jax.agents)")
    seed: int = key(0, "the run's seed: model initialisation, sampling, env games, replay draws")
    init_from: str = key(
        "", "a run directory whose newest checkpoint's policy (and critic) this run starts from (\"\" = none)",
        official="`checkpoint_path` (policy only)")
    iterations: int = key(2000, "outer-loop iterations (roll out, store, learn)", official="`iterations`")
    rollout_size: int = key(128, "dialogues collected per iteration", official="`rollout_size`")
    rollout_group_size: int = key(
        1, "rollouts per game: rollout_size / k games each played k times (grpo's groups; 1 = off)")
    eval_size: int = key(32, "greedy dialogues per evaluation (the same games every time)", official="`eval_size`")
    capacity: int = key(100_000, "replay buffer size in transitions", official="`capacity`")
    batch_size: int = key(
        8, "transitions per optimizer step, times grad_accum_steps (the official code's micro-batch)",
        official="`batch_size`")
    grad_accum_steps: int = key(
        32, "with batch_size: batch_size x grad_accum_steps transitions per optimizer step",
        official="`grad_accum_steps`")
    eval_freq: int = key(
        25, "iterations between greedy evaluations (0 = only before training and at the end)", official="`eval_freq`")
    # A small policy's greedy utterance can loop where its samples do not, so the two can disagree.
    eval_sampled: bool = key(
        False, "also play the evaluation games sampled as the rollouts are, with a fixed key (eval_sampled/* metrics)")
    save_freq: int = key(
        25, "iterations between checkpoints (the last iteration is always saved; 0 = only it)", official="`save_freq`")
    keep_checkpoints: int = key(2, "checkpoints kept in workdir/checkpoints (older ones are deleted)")
    max_nonfinite_steps: int = key(10, "consecutive skipped (non-finite) optimizer steps that stop the run")
    use_wandb: bool = key(False, "also log metrics to Weights & Biases")
    wandb_project: str = key("archer_jax", "the Weights & Biases project (with use_wandb)")
    compilation_cache: str = key(
        "~/.cache/archer_jax/xla", "JAX's persistent compilation cache directory (\"\" = off; JAX_COMPILATION_CACHE_DIR "
        "wins)")

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

    policy: str = key(
        "gpt2", "the policy: a causal LM (GPT-2, Llama, Mistral, Qwen2) as a hub name, an HF-format directory, or "
        "tiny:gpt2 / tiny:llama (built offline)", official="`policy_lm`")
    critic: str = key(
        "roberta-base", "the critic's encoder: a hub name, an HF-format directory, or tiny:roberta (built offline)",
        official="`critic_lm`")
    critic_embedding: str = key("pooler", "the critic's text embedding: pooler | first_token")
    # in_context: one text, so that the encoder can compare the utterance with the turns before it.
    critic_action: str = key(
        "utterance", "the critic's action text: utterance (alone, as the official critic) | in_context (the dialogue "
        "so far + the utterance)", official="— (the official critic encodes the utterance alone)")
    critic_init: str = key(
        "", 'an official critic to start from: critic_init.safetensors from archer_jax.import_official ("" = none)',
        official="the critic and target of `trainer.pt`")
    # replicated: a small critic beside a large FSDP-sharded policy then needs no parameter gathers
    # (the batch is still split).
    critic_sharding: str = key(
        "mesh", "the critic's parameters: mesh (split like the policy's) | replicated (whole on each device)")
    dtype: str = key("auto", "compute dtype: auto (bfloat16 on GPU/TPU, float32 on CPU) | float32 | bfloat16")
    matmul_precision: str = key(
        "default", "float32 matmul precision: default | high | highest (archer_jax/runtime/precision.py)")
    remat: str = key(
        "none", "activation checkpointing per block: none | dots (keep matmul outputs) | full (keep block inputs)")
    max_prompt_length: int = key(512, "policy prompt tokens kept (from the end)")
    max_critic_length: int = key(512, "critic tokens kept per text (from the end)")
    param_dtype: str = key(
        "float32", "the policy's loaded weights: float32 | bfloat16 (LoRA adapters stay float32)",
        official="`use_bfloat16`")
    prompt_format: str = key(
        "plain", "observations -> prompts, utterances -> actions: plain | mistral_20q (archer_jax/sampling/prompts.py)",
        official="the agent's `template` + `decode_f`")
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

    name: str = key("twenty_questions", "the env: a name in archer_jax.envs.registry, or package.module:factory")
    max_turns: int = key(
        20, "turn limit per dialogue (what reaching it is: env.turn_limit)", official="— (each env's own limit)")
    # "end" also ends the games of an env with no limit of its own at max_turns; "cut" bootstraps
    # from V(s'). A crashed worker's episode is always a cut.
    turn_limit: str = key(
        "game", "game (the env says: every env here ends the game there, the last transition terminal) | end | cut "
        "(bootstrap)", official="— (the limit is always `done`)")
    workers: int = key(0, "env worker processes (0 = in this process)")
    timeout_s: float = key(120.0, "seconds of silence after which an env worker is restarted")
    options: dict = key(
        default_factory=dict, free_form=True, official="`env_load_path` (the T5 oracle `.pt`, as `oracle`)",
        doc="extra keyword arguments for the env: --config.env.options.oracle=t5:DIR, or a dict "
            "--config.env.options='{\"oracle\": \"t5:DIR\"}' (detective: game_path)")

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

    staleness: int = key(
        0, "0 = collect, then learn; 1 = collect iteration k+1's dialogues (with the policy after k-1) while k learns")
    slots: int = key(
        0, "dialogues played at once (0 = all of an iteration's); a slot whose dialogue ends takes the next game")

    def __post_init__(self):
        if self.staleness not in STALENESS:
            raise ValueError(f"staleness: must be 0 (serial) or 1 (one iteration ahead), got {self.staleness}")
        _at_least(self, "slots", zero=True)
