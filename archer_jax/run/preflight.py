"""Every check of a run's inputs that needs no model, made before anything is built.

    preflight.check(config, workdir)   # raises ConfigError: one line naming the key or path

:func:`~archer_jax.config.validate` checks the config's keys and values on their own; this adds
what needs the world around it: the workdir (not under /proc or /sys) and the compilation cache
(no URL) can be written, wandb is installed when asked for, the replay buffer fits the memory, the mesh
fits the devices, the policy's ``config.json`` (read, not loaded) leaves room for a prompt next to
``sampling.max_new_tokens`` and describes the right architecture (a hub name that must be
downloaded: one probe of the hub first, no retries), and a ``.jsonl`` of SFT
demonstrations parses. A run that passes fails later only for reasons that appear while it runs.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import jax
import ml_collections

from archer_jax import agents
from archer_jax.config import RunConfig, validate
from archer_jax.data import offline_replay
from archer_jax.envs import registry as envs
from archer_jax.errors import ConfigError
from archer_jax.models import hub
from archer_jax.models.pretrained import ARCHITECTURES, CAUSAL_LM_TYPES
from archer_jax.models.tiny import offline_model, tiny_config, tiny_kind
from archer_jax.pretraining import sft
from archer_jax.runtime import sharding
from archer_jax.runtime.hub_names import is_cached

log = logging.getLogger("archer_jax")

KERNEL_FILE_SYSTEMS = (Path("/proc"), Path("/sys"))
# The least a replay transition takes before its texts and tokens are stored: its slot in each
# column (archer_jax/replay.py, input_pipeline.py): 8-byte references for 3 texts and at least 2
# token rows, 3 float32 numbers and an int64 episode number.
REPLAY_SLOT_BYTES = 5 * 8 + 3 * 4 + 8
TINY_HINT = "or run a config's :tiny preset, which needs no download (e.g. --config=configs/20q.py:tiny)"


def check(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> RunConfig:
    """``config`` validated (the typed :class:`~archer_jax.config.RunConfig`); raises
    :class:`ConfigError` (one line, naming the config key or the path) unless a run of it in
    ``workdir`` can start. Builds and writes nothing."""
    config = validate(config)
    check_workdir(workdir)
    check_compilation_cache(config.compilation_cache)
    check_wandb(config)
    check_replay_capacity(config.capacity)
    check_offline_data(config)
    check_sft_data(config)
    check_sft_cache(config)
    check_models(config)
    check_mesh(config.mesh, jax.device_count())
    check_rollout(config, jax.process_count())
    warn_critic_only(config)
    return config


def warn_critic_only(config: RunConfig) -> None:
    """Says in one line when ``warmup_iter`` leaves no iteration to the actor (a critic-only run,
    which a resume with more ``iterations`` continues)."""
    agent = agents.get(config.agent)
    agent_config = config.algorithm
    if agent.actor_waits_for_warmup(agent_config) and agent_config.warmup_iter >= config.iterations:
        warmup = agent_config.warmup_iter
        log.warning("config.warmup_iter=%d >= config.iterations=%d: this run trains the critic only (the actor "
                    "starts after iteration %d; a resume with more iterations gets there)", warmup, config.iterations,
                    warmup)


def check_rollout(config: RunConfig, processes: int) -> None:
    """Collection one iteration ahead runs in one process: two threads' programs would interleave
    differently on several hosts."""
    if config.rollout.staleness and processes > 1:
        raise ConfigError(f"config.rollout.staleness: {config.rollout.staleness} runs in one process, not "
                          f"{processes}; set 0 for a run over several hosts")


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (a name too long to look up does not)."""
    while path != path.parent:
        try:
            if path.exists():
                break
        except OSError:
            pass
        path = path.parent
    return path


def _check_writable_directory(path: Path, what: str) -> None:
    """``path`` is a writable directory on disk, or can be made one (not under the kernel's
    /proc or /sys; every ancestor that exists is a directory and the nearest one is writable)."""
    virtual = next((root for root in KERNEL_FILE_SYSTEMS if path.absolute().is_relative_to(root)), None)
    if virtual is not None:
        raise ConfigError(f"{what}: {path} is under {virtual}, the kernel's virtual file system, not a directory on disk")
    existing = _nearest_existing(path)
    if not existing.is_dir():
        in_the_way = "is a file" if existing == path else f"cannot be made: {existing} is a file"
        raise ConfigError(f"{what}: {path} {in_the_way}, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == path else f" (it would be made in {existing})"
        raise ConfigError(f"{what}: {existing} is not writable{made}")


def _check_name_lengths(path: Path, what: str) -> None:
    """Each name in ``path``, and the path with the longest file a run writes there, fit the file
    system's limits (NAME_MAX, PATH_MAX of the nearest directory that exists)."""
    existing = _nearest_existing(path)
    try:
        name_max, path_max = os.pathconf(existing, "PC_NAME_MAX"), os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        return
    for name in path.absolute().parts:
        if len(os.fsencode(name)) > name_max:
            raise ConfigError(f"{what}: the name {name[:40]}... is {len(os.fsencode(name))} bytes; this file system "
                              f"allows {name_max}")
    # the deepest file a checkpoint writes is about 160 bytes below the workdir
    if len(os.fsencode(str(path.absolute()))) + 160 > path_max:
        raise ConfigError(f"{what}: {str(path)[:40]}... is {len(os.fsencode(str(path.absolute())))} bytes long; the "
                          f"files a run writes there would pass this file system's {path_max}-byte limit")


def check_workdir(workdir: str | os.PathLike) -> None:
    """The workdir is (or can be made) a writable directory, and what a run writes there is not
    blocked by a file of the same name. An empty or blank path (an unset ``$WORKDIR``) is refused:
    it would train in the current directory, or in one named by spaces."""
    text = os.fspath(workdir)
    if not text.strip():
        raise ConfigError(f"--workdir: {text!r} is empty; give the run's directory, e.g. --workdir=runs/20q")
    if any(part != part.strip() for part in Path(text).parts):
        raise ConfigError(f"--workdir: {text!r} has a name that is blank or starts or ends with a space; "
                          "quote the intended path without them")
    if "://" in str(workdir):
        raise ConfigError(f"--workdir: {workdir} is a URL; the workdir is a directory of the file system "
                          "(for a bucket, mount it with gcsfuse and give the mount path: docs/multihost.md)")
    path = Path(workdir).expanduser()
    _check_name_lengths(path, "--workdir")
    _check_writable_directory(path, "--workdir")
    checkpoints = path / "checkpoints"
    if checkpoints.exists() and not checkpoints.is_dir():
        raise ConfigError(f"--workdir: {checkpoints} is a file, not the checkpoint directory")


def check_compilation_cache(directory: str) -> None:
    """``config.compilation_cache`` can be written, when it is the cache the run will use (a
    cache already set, e.g. by JAX_COMPILATION_CACHE_DIR, wins and is JAX's to check)."""
    if "://" in directory:
        raise ConfigError(f"config.compilation_cache: {directory} is a URL; give a local directory "
                          "(for a bucket, mount it with gcsfuse and give the mount path)")
    if directory and not jax.config.jax_compilation_cache_dir:
        _check_writable_directory(Path(directory).expanduser(), "config.compilation_cache")


def check_wandb(config: RunConfig) -> None:
    """With ``use_wandb``: the wandb package is installed."""
    if config.use_wandb and importlib.util.find_spec("wandb") is None:
        raise ConfigError("config.use_wandb: wandb is not installed (pip install wandb), or set --config.use_wandb=false")


def total_memory_bytes() -> int | None:
    """This machine's physical memory (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_replay_capacity(capacity: int) -> None:
    """The replay buffer's slots (allocated when the first transitions arrive) fit in this
    machine's memory, before any text or token is stored in them."""
    need, have = capacity * REPLAY_SLOT_BYTES, total_memory_bytes()
    if have is not None and need > have:
        raise ConfigError(f"config.capacity: {capacity} transitions need at least {need / 1e9:.3g} GB for the replay "
                          f"buffer's slots alone, and this machine has {have / 1e9:.3g} GB (the official setting is 100000)")


def check_offline_data(config: RunConfig) -> None:
    """An offline run's TFDS build directory (``config.offline.data_dir``) can be written, and a
    given dataset is a ``.json`` dialogue file or a directory of them that parse as the env's games
    (:func:`archer_jax.data.offline_replay.check_dataset`)."""
    if agents.get(config.agent).learns_from_rollouts:
        return
    if config.offline.data_dir:
        _check_writable_directory(Path(config.offline.data_dir).expanduser(), "config.offline.data_dir")
    offline_replay.check_dataset(config)


def check_sft_data(config: RunConfig) -> None:
    """With a warm start: the env has experts (``experts``) or a walkthrough (``walkthrough``), or
    the ``.jsonl`` file parses into at least one (observation, action) pair."""
    if not config.sft.steps:
        return
    data = config.sft.data
    if data == "experts":
        spec = envs.ENVS.get(config.env.name)
        if spec is None or spec.expert is None:
            raise ConfigError(f"config.sft.data: env {config.env.name!r} has no scripted experts; "
                              "use 'walkthrough' (detective) or a .jsonl file")
    elif data == "walkthrough":
        try:
            env = envs.env_factory(config.env)  # a class (or a partial of one): no env is made
        except Exception:  # e.g. the env's own package is missing: the env reports it when made
            return
        env_class = getattr(env, "func", env)
        if isinstance(env_class, type) and not hasattr(env_class, "get_walkthrough"):
            raise ConfigError(f"config.sft.data: env {config.env.name!r} has no walkthrough")
    else:
        sft.read_jsonl(data)


def check_sft_cache(config: RunConfig) -> None:
    """``config.sft.cache``, where a warm start uses it, is a directory or can be made one (an
    existing one that cannot be written may still hold the entry; storing then only warns)."""
    cache = config.sft.cache
    if not cache or not (config.sft.steps or config.critic_pretrain.steps):
        return
    if "://" in cache:
        raise ConfigError(f"config.sft.cache: {cache} is a URL; give a local directory")
    path = Path(cache).expanduser()
    if not path.is_dir():
        _check_writable_directory(path, "config.sft.cache")


def _model_config(name: str) -> tuple[str, dict] | None:
    """(``model_type``, the parsed ``config.json``) of a model name, without loading it; None
    when it cannot be had here (the loader then reports why)."""
    built = offline_model(name)
    if built is not None:
        size, kind = built
        return kind, tiny_config(kind, vocab_size=1, size=size).to_hf_dict()
    found = hub.peek_config(name)
    if found is None:
        return None
    return found.get("model_type"), found


def check_models(config: RunConfig) -> None:
    """The policy's ``config.json`` describes a causal LM (GPT-2 or the Llama family) with room for
    a prompt next to ``sampling.max_new_tokens``; the critic's (when the agent has one) a RoBERTa."""
    roles = [("model.policy", config.model.policy, CAUSAL_LM_TYPES)]
    agent = agents.get(config.agent)
    if agent.networks_for(config.algorithm).critic:
        roles.append(("model.critic", config.model.critic, ("roberta",)))
    _check_hub_reachable(roles)
    for key, name, kinds in roles:
        expected = repr(kinds[0]) if len(kinds) == 1 else f"a causal LM ({', '.join(map(repr, kinds))})"
        try:
            found = _model_config(name)
        except hub.ModelLoadError as e:
            raise ConfigError(f"config.{key}: {e}") from None
        if found is None:
            continue
        model_type, hf_config = found
        if model_type is None:
            raise ConfigError(f"config.{key}: {name} has no model_type in its config.json (expected {expected})")
        if model_type not in kinds:
            raise ConfigError(f"config.{key}: {name} is a {model_type!r} model, not {expected}")
        if model_type in CAUSAL_LM_TYPES:
            try:
                positions = ARCHITECTURES[model_type].config_cls.from_hf_dict(hf_config).max_positions
            except (TypeError, ValueError) as e:
                raise ConfigError(f"config.{key}: {name}'s config.json: {e}") from None
            new_tokens = config.sampling.max_new_tokens
            if new_tokens >= positions:
                raise ConfigError(
                    f"config.sampling.max_new_tokens: {new_tokens} leaves no room for a prompt in the "
                    f"{positions} positions of {key} {name} (must be < {positions})"
                )


def _check_hub_reachable(roles: list[tuple[str, str, tuple[str, ...]]]) -> None:
    """Online, a hub name that is not cached is downloaded: one probe of the hub (no retries)
    first, so that a machine without network gets one line at once, naming the key."""
    needed = [(key, name) for key, name, _ in roles
              if tiny_kind(name) is None and hub.is_hub_name(name) and not is_cached(name)]
    if not needed or hub.is_offline():  # offline, validate already checked the cache
        return
    key, name = needed[0]
    from huggingface_hub import constants

    why = hub.probe(name)
    if why is not None:
        raise ConfigError(f"config.{key}: cannot load {name!r}: it is not in the local Hugging Face cache and the hub at "
                          f"{constants.ENDPOINT} is unreachable ({why}); download it once where the hub is reachable, "
                          f"pass a local directory in Hugging Face format, {TINY_HINT}")


def check_mesh(mesh: sharding.MeshConfig, num_devices: int) -> None:
    """``config.mesh`` fits the run's ``num_devices`` devices (every process's)."""
    try:
        sharding.mesh_shape(mesh.data, mesh.fsdp, mesh.tensor, num_devices=num_devices)
    except ValueError as e:
        raise ConfigError(f"config.mesh: {e}") from None
