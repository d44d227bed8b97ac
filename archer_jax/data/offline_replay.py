"""A fixed dataset of dialogue transitions as the offline agents' replay buffer.

    data = open_dataset(config, workdir, pipeline)     # builds the TFDS dataset once, then reads it
    batch = data.sample(256)                           # texts, rewards, terminals and token rows

It samples like :class:`~archer_jax.replay.ReplayBuffer` (uniformly, with replacement, from its own
NumPy generator) and returns the same columns, so the agents' batch code serves both. Records are
read on demand from the array_record files through ``tfds`` data sources (random access, no
TensorFlow); only the episode numbers and returns of every transition are held in memory (for
filtered BC's ranking). A checkpoint keeps the generator's state and the dataset's name and size,
not the data: a resumed run draws exactly the batches it would have drawn.

Where the data comes from (``config.offline``): ``dataset`` names a directory of dialogue files (or
one file) in the env's format (:mod:`archer_jax.data.dialogues`: LMRL-Gym's for Twenty Questions,
the official one for Guess My City); empty, the run generates ``generate_episodes`` dialogues of
the embedded env's scripted experts in the ``policy_mix`` (:mod:`archer_jax.data.generate`) into
its workdir, and says so. The TFDS build goes to ``data_dir`` (default: the workdir's).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from archer_jax.errors import ConfigError

log = logging.getLogger("archer_jax")

KIND = "offline"
_META = "replay.json"

# config.env.name -> the dataset's env (archer_jax.data.sources.BUILDERS)
DATASET_ENVS = {"twenty_questions": "20q", "twenty_questions_subset": "20q_subset", "guess_my_city": "city"}


class OfflineReplay:
    """Uniform samples of a dataset's transitions with the learners' token rows (module docstring)."""

    def __init__(self, source, pipeline, *, name: str, seed: int = 0):
        from archer_jax.data import sources

        self.source, self.pipeline, self.name = source, pipeline, name
        self.rng = np.random.default_rng(seed)
        episode, episode_return = sources.episode_columns(source)
        self.columns: dict[str, np.ndarray] = {"episode": episode, "episode_return": episode_return}
        self.size = len(episode)
        if self.size == 0:
            raise ConfigError(f"offline dataset {name}: no transitions")

    def __len__(self) -> int:
        return self.size

    def sample(self, count: int) -> dict[str, Any]:
        """``count`` transitions drawn uniformly with replacement."""
        return self.gather(self.rng.integers(0, self.size, count))

    def sample_from(self, positions: np.ndarray, count: int) -> dict[str, Any]:
        """``count`` transitions drawn uniformly with replacement among ``positions``."""
        positions = np.asarray(positions)
        if positions.size == 0:
            raise ValueError("cannot sample from an empty set of positions")
        return self.gather(positions[self.rng.integers(0, positions.size, count)])

    def gather(self, index: np.ndarray) -> dict[str, Any]:
        """The transitions at ``index``: the dataset's columns plus the learners' token rows."""
        from archer_jax.data import sources

        out = sources.read_transitions(self.source, [int(i) for i in index])
        out["terminal"] = np.asarray(out["terminal"], np.float32)
        out["reward"] = np.asarray(out["reward"], np.float32)
        out.update(self.pipeline.token_columns(out["observation"], out["action"], out["next_observation"],
                                               demonstrations=True))
        return out

    # ---- checkpoints: the generator's state and what data it draws from, not the data ------------

    def save(self, directory: str | os.PathLike) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = dict(kind=KIND, name=self.name, size=self.size, rng=self.rng.bit_generator.state)
        (directory / _META).write_text(json.dumps(meta))
        return directory

    def resume(self, state: dict[str, Any]) -> OfflineReplay:
        """Continues the draws a checkpoint's :meth:`save` recorded; the dataset must be the same size."""
        if state.get("size") != self.size:
            raise ConfigError(f"the offline dataset changed since the checkpoint: {self.name} has {self.size} transitions, "
                              f"the checkpoint's had {state.get('size')} ({state.get('name')}); use a new --workdir")
        self.rng.bit_generator.state = state["rng"]
        return self


def saved_state(directory: str | os.PathLike) -> dict[str, Any] | None:
    """What :meth:`OfflineReplay.save` wrote in ``directory``, or None when it holds something else."""
    path = Path(directory) / _META
    if not path.is_file():
        return None
    meta = json.loads(path.read_text())
    return meta if meta.get("kind") == KIND else None


def dataset_env(config) -> str:
    """The dataset kind of ``config.env.name`` (a ConfigError for envs without offline data)."""
    try:
        return DATASET_ENVS[config.env.name]
    except KeyError:
        raise ConfigError(f"config.env.name: offline agents have datasets for {', '.join(DATASET_ENVS)}, "
                          f"not {config.env.name!r}") from None


def manual_dir(config, workdir: Path) -> Path:
    """The directory of dialogue files the TFDS builder reads: ``offline.dataset`` (a directory, or
    one file linked into the workdir), or the workdir's generated data (made on the first call)."""
    c = config.offline
    env = dataset_env(config)
    if c.dataset:
        given = Path(c.dataset).expanduser()
        if given.is_dir():
            return given
        if not given.is_file():
            raise ConfigError(f"config.offline.dataset: {given} is neither a directory of .json dialogue files nor a .json file")
        linked = workdir / "offline" / "given"
        linked.mkdir(parents=True, exist_ok=True)
        link = linked / ("train.json" if given.suffix == ".json" else given.name)
        if not link.exists():
            link.symlink_to(given.resolve())
        return linked
    generated = workdir / "offline" / "generated"
    path = generated / "train.json"
    if not path.is_file():
        from archer_jax.data import generate

        generated.mkdir(parents=True, exist_ok=True)
        games = generate.generate(env, c.generate_episodes, c.policy_mix, seed=c.generate_seed,
                                  max_turns=config.env.max_turns)  # the mix was checked with the config
        generate.write(env, games, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)
        log.warning("no offline.dataset given: generated %d %s dialogues of scripted experts (%s) into %s",
                    c.generate_episodes, env, c.policy_mix, path)
    return generated


def open_dataset(config, workdir: str | os.PathLike, pipeline) -> OfflineReplay:
    """The run's offline dataset (built with TFDS on first use) as an :class:`OfflineReplay`."""
    from archer_jax import distributed
    from archer_jax.data import sources

    workdir = Path(workdir)
    c = config.offline
    env = dataset_env(config)
    data_dir = Path(c.data_dir).expanduser() if c.data_dir else workdir / "offline" / "tfds"
    if distributed.is_primary():  # one host builds, every host reads
        sources.prepare(env, manual_dir(config, workdir), data_dir)
    distributed.barrier("archer_jax: offline dataset built")
    source = sources.data_source(env, data_dir, split=c.split)
    data = OfflineReplay(source, pipeline, name=f"{env}:{c.split} in {data_dir}", seed=config.seed)
    log.info("offline dataset %s: %d transitions of %d episodes", data.name, len(data),
             len(np.unique(data.columns["episode"])))
    return data
