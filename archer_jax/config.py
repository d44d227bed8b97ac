"""The training config: every key with its default, grouped by the code that reads it, and its
validation before anything is built.

Config files (``configs/*.py``) start from :func:`base_config` and change values, never keys::

    def get_config(preset=""):
        c = config.base_config()
        c.env.name = "guess_my_city"
        return c

Every group takes its keys, defaults and checks from a dataclass (:data:`GROUPS`): the top level
is :class:`~archer_jax.parts_config.LoopConfig` plus each agent's own keys (its ``Config`` in
:mod:`archer_jax.agents`: ``critic_steps``, ``bc_steps``, ...); ``c.model``, ``c.model.lora`` and
``c.env`` are :mod:`archer_jax.parts_config`'s; ``c.sampling`` is
:class:`~archer_jax.sampling.SamplingParams`; ``c.learner`` is
:class:`~archer_jax.learners.learner_config.LearnerConfig` with offline ArCHer's
:class:`~archer_jax.learners.offline_archer.IQLConfig`; ``c.ppo`` is
:class:`~archer_jax.learners.ppo.PPOConfig`; ``c.offline`` the offline agents'
:class:`~archer_jax.data.dataset_config.DatasetConfig`; ``c.sft`` is
:class:`~archer_jax.pretraining.sft.SFTConfig`; ``c.critic_pretrain``
:class:`~archer_jax.pretraining.critic.CriticPretrainConfig`; ``c.mesh`` :class:`~archer_jax.runtime.sharding.MeshConfig`. The
defaults are the paper's online setting for Twenty Questions; ``docs/algorithms.md`` lists each
key beside its name in the official code. Keys renamed since 0.1 are in :data:`RENAMED`: a config
or command line that uses one fails with one line naming the new key. One line of documentation
per key is in its field (:func:`archer_jax.runtime.config_keys.key`; ``--help`` prints them with the
defaults, and :mod:`archer_jax.config_docs` writes docs/algorithms.md's key table from them).

:func:`validate` checks a finished config (after ``--config.x=...`` overrides) and returns it
typed, as a :class:`RunConfig` (the loop's keys, each group's dataclass and the agent's
``Config``), which the run, its parts, the agents and the plan read; the ConfigDict stays only
for the records. It raises :class:`~archer_jax.errors.ConfigError` with one line naming the key:
unknown keys (with the closest known one), wrong types, then the dataclasses' checks (unknown
names, values out of range), then what crosses groups (micro-batches that cut the batches, a
dataset for the env, a policy or critic directory that exists). :mod:`archer_jax.run.preflight` adds the checks that need the
workdir, the devices or the models' ``config.json``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
from pathlib import Path
from typing import Any

import ml_collections

from archer_jax import agents
from archer_jax.data.dataset_config import DatasetConfig
from archer_jax.data.offline_replay import DATASET_ENVS
from archer_jax.envs import registry as envs
from archer_jax.errors import ConfigError
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.micro_batching import AUTO, parse_micro_batch_size
from archer_jax.learners.offline_archer import IQLConfig
from archer_jax.learners.ppo import PPOConfig
from archer_jax.models import hub
from archer_jax.models.lora import LoRAConfig
from archer_jax.models.tiny import CAUSAL_KINDS, PREFIXES, offline_model
from archer_jax.parts_config import EnvConfig, LoopConfig, ModelConfig, RolloutConfig
from archer_jax.pretraining.critic import CriticPretrainConfig
from archer_jax.pretraining.sft import SFTConfig
from archer_jax.records.checkpoint import checkpoint_directory
from archer_jax.runtime.sharding import MeshConfig
from archer_jax.sampling import SamplingParams

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


# The config groups and their dataclasses, which hold their defaults and checks: (group, its
# dataclasses, the fields that are no keys); "" is the top level (the agents add theirs).
# validate() constructs these for every run (the offline agents' Config holds the offline group too)
# into the typed RunConfig.
GROUPS = (("", (LoopConfig,), ()), ("model", (ModelConfig,), ()), ("model.lora", (LoRAConfig,), ()),
          ("env", (EnvConfig,), ()), ("learner", (LearnerConfig, IQLConfig), ("distribution",)), ("ppo", (PPOConfig,), ()),
          ("sampling", (SamplingParams,), ("greedy", "stop_strings", "stop_at_eos")), ("sft", (SFTConfig,), ()),
          ("critic_pretrain", (CriticPretrainConfig,), ()), ("mesh", (MeshConfig,), ()), ("rollout", (RolloutConfig,), ()))
AGENT_GROUPS = (("offline", (DatasetConfig,), ()),)


@dataclasses.dataclass(frozen=True)
class RunConfig(LoopConfig):
    """A validated run config, typed: the loop's keys (:class:`LoopConfig`), each group's dataclass
    and the agent's ``Config`` (``algorithm``). :func:`validate` builds it; the run, its parts, the
    agents and the plan read it. ``source`` is the config as given, for the records only
    (config.json, the hyperparameters logged, a resume's comparison)."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    learner: LearnerConfig = dataclasses.field(default_factory=LearnerConfig)
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    sampling: SamplingParams = dataclasses.field(default_factory=SamplingParams)
    sft: SFTConfig = dataclasses.field(default_factory=SFTConfig)
    critic_pretrain: CriticPretrainConfig = dataclasses.field(default_factory=CriticPretrainConfig)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    offline: DatasetConfig = dataclasses.field(default_factory=DatasetConfig)
    algorithm: Any = None  # the agent's Config (archer_jax.agents), from the top-level and group keys
    source: ml_collections.ConfigDict | None = dataclasses.field(default=None, compare=False, repr=False)


def dataclass_defaults(cls: type, skip: tuple[str, ...] = ()) -> dict:
    """``cls``'s fields and defaults, without its key groups (fields with ``group`` metadata)."""
    return {f.name: f.default for f in dataclasses.fields(cls) if not f.metadata.get("group") and f.name not in skip}


def group_at(c: ml_collections.ConfigDict, group: str) -> ml_collections.ConfigDict:
    """The group ``group`` of ``c`` ("" = the top level, "model.lora" = a nested group)."""
    for name in filter(None, group.split(".")):
        c = c[name]
    return c


def _group(name: str) -> ml_collections.ConfigDict:
    """The config group ``name`` of :data:`GROUPS`, from its dataclasses' defaults."""
    classes, skip = next((classes, skip) for group, classes, skip in GROUPS + AGENT_GROUPS if group == name)
    return ml_collections.ConfigDict({k: v for cls in classes for k, v in dataclass_defaults(cls, skip).items()})


def base_config() -> ml_collections.ConfigDict:
    """Every config key with the paper's online defaults for Twenty Questions."""
    c = _group("")  # LoopConfig's keys: the loop and its bookkeeping
    for agent in agents.AGENTS.values():  # the agents' keys: critic_steps, actor_steps, bc_steps, ...
        c.update(dataclass_defaults(agent.Config))
    c.model = _group("model")
    c.model.lora = _group("model.lora")
    c.env = _group("env")
    c.env.options = ml_collections.ConfigDict()  # extra keyword arguments for the env (e.g. game_path)
    c.sampling = _group("sampling")
    c.learner = _group("learner")
    # "auto" or a number: a reference that takes either type.
    c.learner.micro_batch_size = ml_collections.FieldReference(c.learner.micro_batch_size, field_type=object)
    for name in ("offline", "ppo", "sft", "critic_pretrain", "mesh", "rollout"):
        c[name] = _group(name)
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
    "eval_freq": 1, "save_freq": 1, "critic_pretrain.steps": 0,
}


def config_module(path: str | Path):
    """The config file at ``path`` as a module (``get_config``, ``PRESETS``), loaded by path (config
    file names such as ``20q.py`` are no module names): how one config file builds on another."""
    spec = importlib.util.spec_from_file_location(f"archer_jax_config_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def file_config(path: str | Path, preset: str = "") -> ml_collections.ConfigDict:
    """``get_config(preset)`` of the config file at ``path``."""
    return config_module(path).get_config(preset)


def with_preset(c: ml_collections.ConfigDict, preset: str, config_file: str, *, tiny: dict | None = None,
                micro: dict | None = None, more: dict[str, dict] | None = None) -> ml_collections.ConfigDict:
    """``c`` (a config file's official setting) under ``preset``: "" leaves it as it is; "tiny" sets
    :data:`TINY`, then the file's own ``tiny`` keys (dotted names); "micro" sets those, then
    :data:`MICRO` and the file's ``micro`` keys. ``more`` names a file's further presets, each set
    on top of its "tiny". An unknown preset is a ValueError naming the file and its presets."""
    more = more or {}
    if preset not in PRESETS and preset not in more:
        known = ", ".join(repr(p) for p in (*PRESETS, *more))
        raise ValueError(f"unknown preset {preset!r} for {config_file}; known: {known} ('' is the official setting)")
    steps = {"": (), "tiny": (TINY, tiny), "micro": (TINY, tiny, MICRO, micro)}
    steps = steps[preset] if preset in steps else (TINY, tiny, more[preset])
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


def flat_values(c: ml_collections.ConfigDict) -> dict:
    """Every key of ``c`` (``"learner.critic_lr"``) with its value in ``c``."""
    return _flatten(c)


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


def _check_model(key: str, name: str, kinds: tuple[str, ...], weights: bool = True) -> None:
    """A model built offline (``tiny:`` or ``small:``) of a kind in ``kinds``, an existing HF-format
    directory, or (offline) a cached hub name.

    A name that exists on disk is a local directory, whatever it looks like (``models/mygpt2``);
    only a name that is not on disk is looked up on the hub.
    """
    built = offline_model(name)
    if built is not None:
        if built[1] not in kinds:
            allowed = " or ".join(repr(prefix + kind) for prefix in PREFIXES for kind in kinds)
            raise ConfigError(f"config.{key}: {name!r} is not a model built offline for this role; use {allowed}")
        return
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ConfigError(f"config.{key}: {name} is a file, not a model directory")
        if not (path / "config.json").is_file():
            raise ConfigError(f"config.{key}: {name} has no config.json (not a Hugging Face model directory)")
    elif hub.looks_like_path(name):
        raise ConfigError(f"config.{key}: model directory {name} does not exist")
    elif weights and hub.is_offline():  # a hub name must already be cached (online, the loader downloads it)
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
    if c.critic_pretrain.steps:
        batches["critic_pretrain.batch_size"] = c.critic_pretrain.batch_size
    for name, batch in batches.items():
        if size is not None and batch % min(size, batch):
            raise ConfigError(f"{key}: {size} does not cut the step batch of {batch} transitions ({name}) evenly")


def _check_data(c: ml_collections.ConfigDict) -> None:
    """An agent that learns from a dataset has one for the env (the ``offline`` keys are its
    config's, :class:`~archer_jax.data.dataset_config.DatasetConfig`), and the offline-to-online
    start's keys (init_from)."""
    if not agents.get(c.agent).learns_from_rollouts:
        if c.env.name not in DATASET_ENVS:
            raise ConfigError(f"config.env.name: offline agents have datasets for {', '.join(DATASET_ENVS)}, not {c.env.name!r}")
    if c.init_from:
        if c.sft.steps:
            raise ConfigError("config.init_from: a run that starts from another run's networks takes no SFT warm start "
                              f"(sft.steps is {c.sft.steps}); set --config.sft.steps=0")
        checkpoint_directory(c.init_from)
    if c.critic_pretrain.steps and (c.init_from or c.model.critic_init):
        source = "init_from" if c.init_from else "model.critic_init"
        raise ConfigError(f"config.critic_pretrain.steps: the critic starts from {source}'s, which a pretraining "
                          f"before it would not reach; set --config.critic_pretrain.steps=0 or drop {source}")
    if c.critic_init_value and (c.init_from or c.model.critic_init):
        source = "init_from" if c.init_from else "model.critic_init"
        raise ConfigError(f"config.critic_init_value: the critic starts from {source}'s, whose values it would not "
                          f"change; set critic_init_value=0 or drop {source}")
    if c.model.critic_init:
        if c.init_from:
            raise ConfigError("config.model.critic_init: init_from already gives this run its critic; set one of them")
        if not Path(c.model.critic_init).expanduser().is_file():
            raise ConfigError(f"config.model.critic_init: {c.model.critic_init} does not exist (write it with "
                              "python -m archer_jax.import_official trainer.pt --out DIR)")


def _build(cls: type, c: ml_collections.ConfigDict, group: str, skip: tuple[str, ...] = ()):
    """``cls`` from the keys of ``c``'s group ``group`` that it has; a ValueError becomes the
    ConfigError naming the key."""
    keys = set(dataclass_defaults(cls, skip))
    try:
        return cls(**{k: v for k, v in group_at(c, group).items() if k in keys})
    except ValueError as e:
        raise ConfigError(f"config.{group + '.' if group else ''}{e}") from None


def _construct(c: ml_collections.ConfigDict) -> RunConfig:
    """Every config dataclass of ``c`` (the groups' of :data:`GROUPS`, then the agent's ``Config``),
    as the typed :class:`RunConfig`."""
    built = {(group, cls): _build(cls, c, group, skip) for group, classes, skip in GROUPS + AGENT_GROUPS
             for cls in classes}
    try:
        algorithm = agents.get(c.agent).config_of(c)
    except ValueError as e:
        raise ConfigError(f"config.{e}") from None
    model = dataclasses.replace(built["model", ModelConfig], lora=built["model.lora", LoRAConfig])
    env = dataclasses.replace(built["env", EnvConfig], options=c.env.options.to_dict())
    groups = {group: built[group, classes[0]] for group, classes, _ in GROUPS + AGENT_GROUPS if group}
    groups.update(model=model, env=env)
    del groups["model.lora"]
    loop = dataclasses.asdict(built["", LoopConfig])
    return RunConfig(**loop, **groups, algorithm=algorithm, source=c)


def _check_int_bounds(given: dict) -> None:
    """Every integer key is below :data:`MAX_INT` (``iterations=10**21`` is no run)."""
    defaults = flat_defaults()
    for key, value in given.items():
        if isinstance(defaults[key], int) and not isinstance(defaults[key], bool) and value >= MAX_INT:
            raise ConfigError(f"config.{key}: must be < 2**31 ({MAX_INT}), got {value}")


def validate(config: ml_collections.ConfigDict | RunConfig, *, weights: bool = True) -> RunConfig:
    """``config`` as the typed :class:`RunConfig`; raises :class:`ConfigError` (one line, naming the
    key) unless it can be trained (``weights=False``: a hub name need not be cached while offline;
    a plan reads only its shapes). A RunConfig is checked again from its ``source``."""
    if isinstance(config, RunConfig):
        config = config.source
    given = _check_keys(config)
    c = config

    if given["agent"] not in agents.AGENTS:
        raise ConfigError(f"config.agent: unknown value {given['agent']!r}; known: {', '.join(agents.AGENTS)}")
    envs.check(c.env.name)
    if given["offline.generate_seed"] < 0:
        raise ConfigError(f"config.offline.generate_seed: must be >= 0, got {given['offline.generate_seed']}")
    _check_int_bounds(given)
    run = _construct(c)  # the dataclasses' checks: every group's and the agent's keys
    _check_micro_batch_size(c)
    _check_data(c)
    _check_model("model.policy", c.model.policy, CAUSAL_KINDS, weights)
    if agents.get(c.agent).networks_for(run.algorithm).critic:
        _check_model("model.critic", c.model.critic, ("roberta",), weights)
    envs.check_options(c.env.name, run)
    return run
