"""A fixed dataset of dialogue transitions as the offline agents' replay buffer.

    data = open_dataset(config, workdir, pipeline)     # builds the TFDS dataset once, then reads it
    batch = data.sample(256)                           # texts, rewards, terminals and token rows

It samples like :class:`~archer_jax.replay.ReplayBuffer` (uniformly, with replacement, from its own
NumPy generator) and returns the same columns, so the agents' batch code serves both. Records are
read on demand from the array_record files through ``tfds`` data sources (random access, no
TensorFlow); only the episode numbers and returns of every transition are held in memory (for
filtered BC's ranking). A checkpoint keeps the generator's state and the dataset's name, size and
files (names, sizes and SHA-256), not the data: a resumed run draws exactly the batches it would
have drawn, and one whose files changed since is refused.

Where the data comes from (``config.offline``): ``dataset`` names a directory of dialogue files (or
one file) in the env's format (:mod:`archer_jax.data.dialogues`: LMRL-Gym's for Twenty Questions,
the official one for Guess My City); empty, the run generates ``generate_episodes`` dialogues of
the embedded env's scripted experts in the ``policy_mix`` (:mod:`archer_jax.data.generate`) into
its workdir, and says so. The TFDS build goes to ``data_dir`` (default: the workdir's) and is
rebuilt whenever the files differ from those it was built from (:func:`archer_jax.data.sources.prepare`).
:func:`check_dataset` reads and checks the given files before anything is built.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from archer_jax.data import dialogues, generate
from archer_jax.envs.twenty_questions import SUBSET
from archer_jax.errors import ConfigError
from archer_jax.runtime import distributed

log = logging.getLogger("archer_jax")

KIND = "offline"
_META = "replay.json"

# config.env.name -> the dataset's env (archer_jax.data.sources.BUILDERS)
DATASET_ENVS = {"twenty_questions": "20q", "twenty_questions_subset": "20q_subset", "guess_my_city": "city"}
_LMRL = 'LMRL-Gym\'s Twenty Questions games: {"lines": ["Is it an animal? No.", ...], "correct": bool, "word": [...]}'
_CITY = 'Guess My City games: {"conversation": ["Is it in Asia? Yes, ...", ...], "done": bool, "word": "bogota,colombia"}'
FORMATS = {"20q": _LMRL, "20q_subset": _LMRL, "city": _CITY}  # each file: a JSON list of these


class OfflineReplay:
    """Uniform samples of a dataset's transitions with the learners' token rows (module docstring)."""

    def __init__(self, source, pipeline, *, name: str, seed: int = 0, files: dict[str, Any] | None = None):
        # TFDS stays off an online run's import path: imported only when a dataset is read or built
        from archer_jax.data import sources

        self.source, self.pipeline, self.name = source, pipeline, name
        self.files = _contents(files)  # what the checkpoint compares: each file's name, size and hash
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
        # TFDS stays off an online run's import path: imported only when a dataset is read or built
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
        meta = dict(kind=KIND, name=self.name, size=self.size, files=self.files, rng=self.rng.bit_generator.state)
        (directory / _META).write_text(json.dumps(meta))
        return directory

    def resume(self, state: dict[str, Any]) -> OfflineReplay:
        """Continues the draws a checkpoint's :meth:`save` recorded; the dataset must be made of the
        same files (a checkpoint that did not record them: of the same size)."""
        _check_unchanged(state, self.files)
        if state.get("size") != self.size:
            raise ConfigError(f"the offline dataset changed since the checkpoint: {self.name} has {self.size} transitions, "
                              f"the checkpoint's had {state.get('size')} ({state.get('name')}); use a new --workdir")
        self.rng.bit_generator.state = state["rng"]
        return self


def _contents(files: dict[str, Any] | None) -> dict[str, list] | None:
    """A :func:`~archer_jax.data.sources.fingerprint` without the paths: ``{split: [[name, bytes, sha256], ...]}``."""
    if files is None:
        return None
    return {split: [[f["name"], f["bytes"], f["sha256"]] for f in entries] for split, entries in sorted(files.items())}


def _check_unchanged(state: dict[str, Any], files: dict[str, list] | None) -> None:
    """A checkpoint's dataset ``state`` names the same ``files`` (:func:`_contents`) where both are known."""
    if state.get("files") is not None and files is not None and state["files"] != files:
        raise ConfigError(f"config.offline.dataset: the dataset's files changed since the checkpoint "
                          f"({_file_list(state['files'])} then, {_file_list(files)} now); "
                          "put the checkpoint's files back, or use a new --workdir")


def _file_list(files: dict[str, list]) -> str:
    return ", ".join(f"{name} {size} bytes sha256 {digest[:12]}" for entries in files.values() for name, size, digest in entries)


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


def check_dataset(config) -> None:
    """``config.offline.dataset`` is a ``.json`` dialogue file or a directory with a train file, every
    file of it parses as the env's games (at least one), and it has a file of ``config.offline.split``;
    else a one-line :class:`ConfigError` naming the key and the user's file. Builds nothing."""
    # TFDS stays off an online run's import path: imported only when a dataset is read or built
    from archer_jax.data import sources
    from archer_jax.data.dialogue_builder import EVAL_MARKERS, manual_splits

    c = config.offline
    env = dataset_env(config)
    if not c.dataset:
        if c.split != "train":
            raise ConfigError(f"config.offline.split: the generated dialogues (no config.offline.dataset) have a train "
                              f"split only, not {c.split!r}")
        return
    given = Path(c.dataset).expanduser()
    if given.is_dir():
        try:
            splits = manual_splits(given)  # the builder's own reading of a directory
        except ValueError as e:
            raise ConfigError(f"config.offline.dataset: {e}") from None
        files = [path for paths in splits.values() for path in paths]
    elif given.is_file():
        if given.suffix != ".json":
            raise ConfigError(f"config.offline.dataset: {given} is not a .json file (give a .json dialogue file, or a "
                              "directory of them)")
        files, splits = [given], {"train"}  # one file is the train split, whatever its name
    else:
        raise ConfigError(f"config.offline.dataset: {given} does not exist")
    if c.split not in splits:
        raise ConfigError(f"config.offline.split: {given} has no {c.split} file (a .json file whose name contains one "
                          f"of {', '.join(EVAL_MARKERS)})")
    for path in files:
        try:
            games = sources.BUILDERS[env].read_games(path)
        except (OSError, ValueError) as e:
            raise ConfigError(f"config.offline.dataset: {' '.join(str(e).split())}; each file is a JSON list of "
                              f"{FORMATS[env]}") from None
        if not games:
            raise ConfigError(f"config.offline.dataset: {path} holds no games (an empty JSON list)")


def manual_dir(config, workdir: Path) -> Path:
    """The directory of dialogue files the TFDS builder reads: ``offline.dataset`` (a directory, or
    one ``.json`` file linked into the workdir as ``train.json``), or the workdir's generated data
    (made on the first call, and again whenever the ``offline.generate_*`` keys or the policy mix change)."""
    c = config.offline
    env = dataset_env(config)
    if c.dataset:
        given = Path(c.dataset).expanduser()
        if given.is_dir():
            return given
        if not given.is_file() or given.suffix != ".json":
            raise ConfigError(f"config.offline.dataset: {given} is neither a directory of .json dialogue files nor a .json file")
        linked = workdir / "offline" / "given"
        linked.mkdir(parents=True, exist_ok=True)
        link = linked / "train.json"
        for old in linked.iterdir():  # another dataset's link, from an earlier start in this workdir
            if old.is_symlink() and (old != link or old.resolve() != given.resolve()):
                old.unlink()
        if not link.is_symlink():
            link.symlink_to(given.resolve())
        return linked
    generated = workdir / "offline" / "generated"
    path, spec_path = generated / "train.json", workdir / "offline" / "generated_settings.json"  # not among the dialogues
    spec = dict(env=env, episodes=c.generate_episodes, policy_mix=c.policy_mix, seed=c.generate_seed,
                max_turns=config.env.max_turns)
    if not path.is_file() or _read_json(spec_path) != spec:
        generated.mkdir(parents=True, exist_ok=True)
        if path.is_file():
            log.info("the dialogues generated in %s were made with %s, not %s: generating them again",
                     path, _read_json(spec_path) or "settings it did not record", spec)
        games = generate.generate(env, c.generate_episodes, c.policy_mix, seed=c.generate_seed,
                                  max_turns=config.env.max_turns)  # the mix was checked with the config
        generate.write(env, games, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)
        spec_path.write_text(json.dumps(spec) + "\n")
        log.warning("no offline.dataset given: generated %d %s dialogues of scripted experts (%s) into %s",
                    c.generate_episodes, env, c.policy_mix, path)
    return generated


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _warn_outside_subset(manual: Path, named: str | Path) -> None:
    """One line when the dataset's games hide objects the 10-object subset has not: it was made for
    the full game, which the run's evaluations do not play."""
    # TFDS stays off an online run's import path: dialogue_builder imports it
    from archer_jax.data import dialogue_builder

    games = [g for paths in dialogue_builder.manual_splits(manual).values() for p in paths
             for g in dialogues.read_lmrl_20q(p)]
    outside = [g for g in games if not {str(n).lower() for n in (g["word"] if isinstance(g["word"], list) else [g["word"]])}
               & {name.lower() for name in SUBSET}]
    if outside:
        first = outside[0]["word"]
        log.warning("offline dataset %s: %d of its %d games hide an object outside twenty_questions_subset's 10 (e.g. "
                    "%r): it was made for the full game (env.name=twenty_questions), and this run evaluates on the "
                    "subset", named, len(outside), len(games), first[0] if isinstance(first, list) else first)


def open_dataset(config, workdir: str | os.PathLike, pipeline, checkpoint: dict[str, Any] | None = None) -> OfflineReplay:
    """The run's offline dataset (built with TFDS on first use) as an :class:`OfflineReplay`; a
    resume passes its ``checkpoint``'s dataset state, and files changed since are refused before
    the build they were made into is touched."""
    # TFDS stays off an online run's import path: imported only when a dataset is read or built
    from archer_jax.data import sources

    workdir = Path(workdir)
    c = config.offline
    env = dataset_env(config)
    data_dir = Path(c.data_dir).expanduser() if c.data_dir else workdir / "offline" / "tfds"
    if distributed.is_primary():  # one host builds, every host reads
        given = manual_dir(config, workdir)
        files = sources.fingerprint(given)  # hashed once: compared with the checkpoint's, then the build's
        if checkpoint is not None:
            _check_unchanged(checkpoint, _contents(files))
        sources.prepare(env, given, data_dir, files)
        if env == "20q_subset":
            _warn_outside_subset(given, c.dataset or given)
    distributed.barrier("archer_jax: offline dataset built")
    source = sources.data_source(env, data_dir, split=c.split)
    data = OfflineReplay(source, pipeline, name=f"{env}:{c.split} in {data_dir}", seed=config.seed,
                         files=sources.built_from(env, data_dir))
    log.info("offline dataset %s: %d transitions of %d episodes", data.name, len(data),
             len(np.unique(data.columns["episode"])))
    return data
