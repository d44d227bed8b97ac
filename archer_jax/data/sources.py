"""The offline datasets as the learners read them: build once, then random access without TensorFlow.

    builder = prepare("20q", manual_dir="lmrl/twenty_questions", data_dir="~/tensorflow_datasets")
    source = data_source("20q", data_dir="~/tensorflow_datasets")       # len(source), source[i]
    batch = read_transitions(source, [3, 17, 42])                       # columns: texts as str, numbers as numpy
    episode, episode_return = episode_columns(source)                   # for filtered BC

Data are stored as array_record (TFDS) under ``data_dir/<dataset>/1.0.0``; records come back in a
shuffled order, and the ``episode`` field groups them. ``"20q"`` and ``"20q_subset"`` share the
``twenty_questions`` dataset. A build records the files it was made from (their paths, sizes and
SHA-256, :func:`fingerprint`) in ``source.json`` beside it, and is reused only for the same files:
``prepare`` rebuilds it from other or changed files, and says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from archer_jax.data.dialogue_builder import TEXT_FEATURES, manual_splits
from archer_jax.data.guess_my_city import GuessMyCity
from archer_jax.data.twenty_questions import TwentyQuestions

log = logging.getLogger(__name__)

BUILDERS: dict[str, type] = {"20q": TwentyQuestions, "20q_subset": TwentyQuestions, "city": GuessMyCity}
FILE_FORMAT = "array_record"
NUMBER_DTYPES = {
    "reward": np.float32, "terminal": np.bool_, "turn": np.int32, "episode_return": np.float32,
    "success": np.bool_, "episode": np.int64,
}
CHUNK = 4096  # records per __getitems__ call in episode_columns
SOURCE = "source.json"  # in a build's directory: the fingerprint of the files it was built from


def builder(env: str, data_dir: str | Path) -> tfds.core.DatasetBuilder:
    """The (maybe not yet built) dataset builder of ``env`` over ``data_dir``."""
    if env not in BUILDERS:
        raise ValueError(f"env {env!r}: no offline dataset; known: {', '.join(BUILDERS)}")
    return BUILDERS[env](data_dir=str(Path(data_dir).expanduser()), file_format=FILE_FORMAT)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(manual_dir: str | Path) -> dict[str, Any]:
    """What a build of ``manual_dir`` is made from: for each ``.json`` file the builder reads (by
    split), its name, resolved path, size and SHA-256."""
    splits = manual_splits(Path(manual_dir).expanduser())
    return {split: [dict(name=p.name, path=str(p.resolve()), bytes=p.stat().st_size, sha256=_sha256(p)) for p in paths]
            for split, paths in splits.items()}


def built_from(env: str, data_dir: str | Path) -> dict[str, Any] | None:
    """The :func:`fingerprint` recorded with ``env``'s build in ``data_dir``; None when none was."""
    path = Path(builder(env, data_dir).data_dir) / SOURCE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def prepare(env: str, manual_dir: str | Path, data_dir: str | Path,
            files: dict[str, Any] | None = None) -> tfds.core.DatasetBuilder:
    """Builds ``env``'s dataset from the files of ``manual_dir`` into ``data_dir`` unless it is built
    from the very same files (their :func:`fingerprint`, given as ``files`` when the caller has it);
    returns the builder."""
    built = builder(env, data_dir)
    manual_dir = Path(manual_dir).expanduser()
    splits = manual_splits(manual_dir)  # one-line errors before TFDS's own
    files = fingerprint(manual_dir) if files is None else files
    if built.is_prepared():
        recorded = built_from(env, data_dir)
        if recorded == files:
            log.info("%s: reusing the dataset built in %s from the same files", built.name, built.data_dir)
            return built
        log.info("%s: rebuilding %s: it was built from %s, not from %s", built.name, built.data_dir,
                 _describe(recorded) if recorded else "files it did not record", _describe(files))
        shutil.rmtree(built.data_dir)
        built = builder(env, data_dir)
    log.info("%s: building from %s", built.name, ", ".join(f"{k}: {[p.name for p in v]}" for k, v in splits.items()))
    tfds.display_progress_bar(False)  # its per-shard bars would flood a run's log; the log lines above say it
    with contextlib.redirect_stdout(io.StringIO()):  # TFDS prints "Downloading and preparing dataset Unknown size"
        built.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir)), file_format=FILE_FORMAT
        )
    (Path(built.data_dir) / SOURCE).write_text(json.dumps(files, indent=1) + "\n")
    log.info("%s: built %s", built.name, ", ".join(f"{k}: {v.num_examples} transitions" for k, v in built.info.splits.items()))
    return built


def _describe(files: dict[str, Any]) -> str:
    """``path (bytes, sha256 prefix)`` of every file of a :func:`fingerprint`."""
    return ", ".join(f"{f['path']} ({f['bytes']} bytes, sha256 {f['sha256'][:12]})" for split in files.values() for f in split)


def data_source(env: str, data_dir: str | Path, split: str = "train") -> Any:
    """The random-access source of ``split`` (``len(src)``, ``src[i]``, ``src.__getitems__(indices)``)."""
    built = builder(env, data_dir)
    if not built.is_prepared():
        raise FileNotFoundError(f"{built.data_dir}: the {built.name} dataset is not built; call prepare({env!r}, ...) first")
    if split not in built.info.splits:
        raise ValueError(f"{built.data_dir}: {built.name} has no split {split!r}; splits: {', '.join(built.info.splits)}")
    return built.as_data_source(split=split)


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _records(source: Any, index: Sequence[int]) -> list:
    indices = [int(i) for i in index]
    if hasattr(source, "__getitems__"):
        return list(source.__getitems__(indices))
    return [source[i] for i in indices]  # any sequence of decoded records (a list of dicts in tests)


def read_transitions(source: Any, index: Sequence[int]) -> dict[str, list | np.ndarray]:
    """The records at ``index`` as columns: texts as lists of str, numbers as numpy arrays (see NUMBER_DTYPES)."""
    records = _records(source, index)
    columns: dict[str, list | np.ndarray] = {key: [_text(r[key]) for r in records] for key in TEXT_FEATURES}
    for key, dtype in NUMBER_DTYPES.items():
        columns[key] = np.asarray([r[key] for r in records], dtype=dtype).reshape(len(records))
    return columns


def _raw_episode_columns(source: Any, indices: list[int]) -> tuple[list[int], list[float]] | None:
    """``episode`` and ``episode_return`` of a TFDS array_record source's records parsed from their
    serialized tf.train.Example alone (6x faster than decoding every text); None for other sources."""
    raw_source = getattr(source, "data_source", None)
    if not hasattr(raw_source, "__getitems__"):
        return None
    from tensorflow_datasets.proto import tf_example_pb2  # protobuf only, no TensorFlow

    episode, episode_return = [], []
    try:
        for raw in raw_source.__getitems__(indices):
            feature = tf_example_pb2.Example.FromString(raw).features.feature
            episode.append(feature["episode"].int64_list.value[0])
            episode_return.append(feature["episode_return"].float_list.value[0])
    except (KeyError, IndexError, TypeError) as e:
        log.debug("episode_columns: decoding whole records (%s)", e)
        return None
    return episode, episode_return


def episode_columns(source: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(episode int64[N], episode_return float32[N])`` of every record of ``source``, in record order,
    read in chunks of ``CHUNK`` records."""
    n = len(source)
    episode, episode_return = np.empty(n, np.int64), np.empty(n, np.float32)
    for start in range(0, n, CHUNK):
        indices = list(range(start, min(start + CHUNK, n)))
        columns = _raw_episode_columns(source, indices)
        if columns is None:
            records = _records(source, indices)
            columns = [r["episode"] for r in records], [r["episode_return"] for r in records]
        episode[start : start + len(indices)], episode_return[start : start + len(indices)] = columns
    return episode, episode_return
