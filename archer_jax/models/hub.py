"""Hugging Face format on disk: resolve a hub name or directory, read and write weights/configs.

A *model directory* is what ``save_pretrained`` writes: ``config.json``, the weights
(``model.safetensors``, sharded ``model-0000x-of-0000y.safetensors`` + index, or the older
``pytorch_model.bin``), and usually the tokenizer files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from archer_jax.runtime.hub_names import CONFIG, is_offline, looks_like_path

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"
TORCH_BIN_INDEX = "pytorch_model.bin.index.json"
_TOKENIZER_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "generation_config.json",
]
# Top-level weights only: repos also hold onnx/, flax and tf copies that we never read.
_SAFETENSORS_FILES = [SAFETENSORS, "model-*-of-*.safetensors", SAFETENSORS_INDEX]
_TORCH_FILES = [TORCH_BIN, "pytorch_model-*-of-*.bin", TORCH_BIN_INDEX]


# Any of these makes a directory's tokenizer loadable (besides a sentencepiece *.model file).
_TOKENIZER_DEFINING_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json")


def has_tokenizer_files(directory: Path) -> bool:
    """Whether ``directory`` holds the files a tokenizer is built from."""
    return any((directory / name).is_file() for name in _TOKENIZER_DEFINING_FILES) or any(directory.glob("*.model"))


class ModelLoadError(ValueError):
    """A model or tokenizer could not be found or read; the message names the name or path."""


def resolve(name_or_path: str | os.PathLike) -> Path:
    """Returns a local model directory for a hub name (``gpt2``) or a directory.

    A name that exists on disk is local, relative or not (``models/mygpt2``); only a name that
    is not on disk and looks like a hub id (``name`` or ``owner/name``) is looked up on the hub.
    A hub name is looked up in the Hugging Face cache and downloaded when the hub is reachable
    (config, tokenizer and safetensors weights; ``pytorch_model.bin`` only where a repo has no
    safetensors). Raises :class:`ModelLoadError` with a one-line reason otherwise.
    """
    name = os.fspath(name_or_path)
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelLoadError(f"{path} is a file; pass the model directory that holds {CONFIG} and the weights")
    if looks_like_path(name):
        raise ModelLoadError(f"model directory {path} does not exist")
    return _download(name)


def _download(repo_id: str) -> Path:
    import huggingface_hub
    from huggingface_hub import errors as hf_errors

    patterns = [CONFIG, *_TOKENIZER_FILES]
    try:
        local = Path(huggingface_hub.snapshot_download(repo_id, allow_patterns=[*patterns, *_SAFETENSORS_FILES]))
        if not _weight_files(local):
            local = Path(huggingface_hub.snapshot_download(repo_id, allow_patterns=[*patterns, *_TORCH_FILES]))
    except hf_errors.HFValidationError:
        raise ModelLoadError(f"{repo_id!r} is neither a local directory nor a valid Hugging Face hub name") from None
    except hf_errors.RepositoryNotFoundError:
        raise ModelLoadError(f"{repo_id!r} is neither a local directory nor a model on the Hugging Face hub") from None
    except Exception as e:  # offline mode, no network, or a cache miss: one message for all
        why = "HF_HUB_OFFLINE is set" if is_offline() else f"the hub is unreachable ({type(e).__name__})"
        raise ModelLoadError(
            f"cannot load {repo_id!r}: it is neither an existing directory nor in the local Hugging Face cache, "
            f"and {why}; download it once where the hub is reachable, or pass a local directory in Hugging Face "
            f"format ({CONFIG} + {SAFETENSORS}) instead of the name"
        ) from None
    return local


def is_hub_name(name: str) -> bool:
    """Whether ``name`` would be looked up on the hub: not on disk and not meant as a path."""
    return not Path(name).expanduser().exists() and not looks_like_path(name)


def probe(repo_id: str, timeout_s: float = 5.0) -> str | None:
    """One request for ``repo_id`` to the hub's endpoint (``HF_ENDPOINT``), without retries: None
    when the hub answers (whatever the answer: the loader reads it), else why it did not."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    request = urllib.request.Request(f"{constants.ENDPOINT.rstrip('/')}/api/models/{repo_id}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError:  # an answer: 401, 404, ... (the loader reports what it means)
        return None
    except (OSError, ValueError) as e:  # no connection, a timeout, a closed connection, a bad endpoint
        reason = getattr(e, "reason", None)
        return type(reason if isinstance(reason, BaseException) else e).__name__


def peek_config(name_or_path: str | os.PathLike, online: bool = True) -> dict[str, Any] | None:
    """``config.json`` of a model directory or hub name, without reading or downloading weights.

    A hub name is read from the Hugging Face cache, or (online, unless ``online`` is False) only
    its ``config.json`` is fetched. None when it cannot be had: the loader then reports why, in one line.
    """
    name = os.fspath(name_or_path)
    path = Path(name).expanduser()
    if path.is_dir():
        return read_config(path)
    if path.exists() or looks_like_path(name):
        return None
    import huggingface_hub

    try:
        cached = huggingface_hub.try_to_load_from_cache(name, CONFIG)
        if isinstance(cached, str):
            file = Path(cached)
        elif is_offline() or not online:
            return None
        else:
            file = Path(huggingface_hub.hf_hub_download(name, CONFIG))
        return json.loads(file.read_text())
    except Exception:  # an invalid or unknown name, no network, a bad file: the loader says which
        return None


# Copies of the hub's config.json of the models the presets name, shipped with the package so
# that shapes are known without network or cache (``archer_jax.plan`` on a laptop, for one).
_PACKAGED_CONFIGS = Path(__file__).resolve().parent.parent / "assets" / "model_configs"


def packaged_config_names() -> list[str]:
    """The hub names whose ``config.json`` ships with archer_jax (``gpt2``, ``roberta-base``,
    ``mistralai/Mistral-7B-Instruct-v0.2``, ...), sorted."""
    if not _PACKAGED_CONFIGS.is_dir():
        return []
    return sorted(d.name.replace("--", "/") for d in _PACKAGED_CONFIGS.iterdir() if (d / CONFIG).is_file())


def known_config(name_or_path: str | os.PathLike) -> dict[str, Any] | None:
    """``config.json`` of a model, from wherever it can be had without weights.

    In order: a model directory, the Hugging Face cache, the copy that ships with archer_jax for
    the models the presets name (see :func:`packaged_config_names`), and last the hub (when
    online). The shapes of these models are thus known offline, with an empty cache, and without
    waiting on a hub that cannot be reached. None when none of these has it.
    """
    name = os.fspath(name_or_path)
    packaged = name in packaged_config_names()
    found = peek_config(name_or_path, online=not packaged)
    if found is not None or not packaged:
        return found
    return json.loads((_PACKAGED_CONFIGS / name.replace("/", "--") / CONFIG).read_text())


def read_config(directory: Path) -> dict[str, Any]:
    """Parses ``config.json`` of a model directory."""
    file = directory / CONFIG
    if not file.is_file():
        raise ModelLoadError(f"{directory} has no {CONFIG}; it is not a Hugging Face model directory")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{file} is not valid JSON: {e}") from None


def _weight_files(directory: Path) -> list[Path]:
    """The weight files to read, preferring safetensors; empty when there are none."""
    for single, index in ((SAFETENSORS, SAFETENSORS_INDEX), (TORCH_BIN, TORCH_BIN_INDEX)):
        if (directory / index).is_file():
            weight_map = json.loads((directory / index).read_text())["weight_map"]
            return [directory / f for f in sorted(set(weight_map.values()))]
        if (directory / single).is_file():
            return [directory / single]
    return []


class WeightReader(Mapping[str, np.ndarray]):
    """The tensors of a model directory by name, read one at a time when asked for.

    Safetensors files are opened lazily (memory-mapped), so converting a checkpoint tensor by
    tensor never holds the whole model in host memory: with sharded safetensors a 7B model
    costs one tensor at a time. ``pytorch_model*.bin`` files can only be read whole (per file).
    """

    def __init__(self, directory: Path):
        files = _weight_files(directory)
        if not files:
            raise ModelLoadError(
                f"{directory} has no weights: expected {SAFETENSORS}, {SAFETENSORS_INDEX}, {TORCH_BIN} or {TORCH_BIN_INDEX}"
            )
        self._where: dict[str, Path] = {}
        self._eager: dict[str, np.ndarray] = {}
        for file in files:
            if not file.is_file():
                raise ModelLoadError(f"weight file {file} named by the index is missing")
            if file.suffix == ".safetensors":
                self._where.update((name, file) for name in _safetensors_names(file))
            else:
                self._eager.update(_read_torch_bin(file))

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._eager:
            return self._eager[name]
        file = self._where[name]
        from safetensors import safe_open

        try:
            with safe_open(file, framework="numpy") as f:
                return f.get_tensor(name)
        except Exception as e:
            raise ModelLoadError(f"cannot read tensor {name} of {file}: {e}") from None

    def __iter__(self):
        yield from self._where
        yield from self._eager

    def __len__(self) -> int:
        return len(self._where) + len(self._eager)

    def __contains__(self, name: object) -> bool:
        return name in self._where or name in self._eager


def read_weights(directory: Path) -> dict[str, np.ndarray]:
    """All tensors of a model directory as NumPy arrays (bfloat16 via ``ml_dtypes``)."""
    reader = WeightReader(directory)
    return {name: reader[name] for name in reader}


def _safetensors_names(file: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(file, framework="numpy") as f:
            return list(f.keys())
    except Exception as e:
        raise ModelLoadError(f"cannot read {file}: {e}") from None


def _read_torch_bin(file: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise ModelLoadError(
            f"{file} is a PyTorch checkpoint and reading it needs torch: pip install torch, "
            f"or convert the directory to {SAFETENSORS}"
        ) from None
    import ml_dtypes

    try:
        # weights_only: a checkpoint from the internet must not run code.
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelLoadError(f"cannot read {file}: {e}") from None
    out = {}
    for name, t in state.items():
        t = t.detach().contiguous()
        out[name] = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()
    return out


def write_model_dir(directory: Path, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
    """Writes ``config.json`` and ``model.safetensors`` (PyTorch-format metadata) into ``directory``."""
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(tensors, directory / SAFETENSORS, metadata={"format": "pt"})
