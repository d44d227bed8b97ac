"""Reading the official ArCHer PyTorch files (``torch.save`` dicts of state dicts), and the
fine-tuned flan-t5 oracles (``20q_t5_oracle.pt``, ``city_t5_oracle.pt``:
``{"model_state_dict": T5ForConditionalGeneration.state_dict()}``) as Hugging Face directories.

Files are read with ``torch.load(weights_only=True)``, so a file that is not plain tensors is
refused, not run. An oracle file holds weights only: the architecture is read from the tensor
shapes, and the tokenizer (and the special token ids, and whether the decoder output is scaled
by ``d_model ** -0.5``) come from a base model (default ``google/flan-t5-small``, the model the
official code fine-tuned). ``python -m
archer_jax.import_official`` is the command line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from archer_jax.models import hub
from archer_jax.models.t5 import weights
from archer_jax.models.t5.model import scales_decoder_output
from archer_jax.models.tokenizer import load_tokenizer
from archer_jax.models.weight_rules import MappingError, check_names

log = logging.getLogger(__name__)

DEFAULT_BASE = "google/flan-t5-small"


class OfficialFileError(hub.ModelLoadError):
    """An official file that cannot be imported (one line naming the file and the reason)."""


def read_torch(path: str | Path) -> Any:
    """The object saved at ``path`` by ``torch.save``, loaded with ``weights_only=True``."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise OfficialFileError(f"{path}: no such file")
    try:
        import torch
    except ImportError:
        raise OfficialFileError(f"{path}: reading an official PyTorch file needs torch (pip install torch)") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises several kinds; all mean "not importable"
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OfficialFileError(f"{path}: not a plain state dict that torch.load(weights_only=True) reads: {reason}") from None


def state_dict(obj: Any, path: str | Path, key: str = "model_state_dict") -> dict[str, np.ndarray]:
    """The tensors of ``obj[key]`` (or of ``obj`` itself when it is already a state dict) as
    float32 / integer NumPy arrays."""
    import torch

    tensors = obj.get(key, obj) if isinstance(obj, dict) else obj
    if not isinstance(tensors, dict) or not tensors or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        keys = ", ".join(map(str, list(obj)[:6])) if isinstance(obj, dict) else type(obj).__name__
        raise OfficialFileError(f"{path}: expected a state dict of tensors under {key!r}; found {keys}")
    out = {}
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        out[name] = (t.float() if t.is_floating_point() else t).numpy()
    return out


def convert_t5_oracle(path: str | Path, out: str | Path, *, base: str = DEFAULT_BASE) -> Path:
    """Writes the official T5 oracle at ``path`` as an HF directory ``out`` (config from the
    shapes; tokenizer, special ids and output scaling from ``base``). Returns ``out``; nothing
    is written when ``base`` lacks a tokenizer."""
    tensors = state_dict(read_torch(path), path)
    try:
        base_dir = hub.resolve(base)
        tokenizer = load_tokenizer(base_dir, padding_side="right")  # before anything is written
    except hub.ModelLoadError as e:
        raise OfficialFileError(f"{path}: the official file holds weights only; its tokenizer comes from --base: {e}") from None
    base_config = hub.read_config(base_dir) if (base_dir / hub.CONFIG).is_file() else {}
    ids = {k: base_config[k] for k in ("pad_token_id", "eos_token_id", "decoder_start_token_id",
                                        "relative_attention_max_distance", "layer_norm_epsilon") if base_config.get(k) is not None}
    if isinstance(ids.get("eos_token_id"), list):  # config.json may list several; T5 ends on the first
        ids["eos_token_id"] = ids["eos_token_id"][0]
    if base_config:  # the shapes cannot tell whether the decoder output is scaled; the base's config does
        ids["scale_decoder_outputs"] = scales_decoder_output(base_config)
    try:
        config = weights.config_from_tensors(tensors, **ids)
        used, _, unused = check_names(weights.rules(config), tensors)
    except (KeyError, MappingError) as e:
        raise OfficialFileError(f"{path}: {e.args[0] if e.args else e}") from None
    unused = [n for n in unused if n not in weights.IGNORED]
    if unused:
        log.warning("%s: ignoring %d tensors a T5 does not use: %s", path, len(unused), ", ".join(unused[:5]))
    out = Path(out).expanduser()
    try:
        hub.write_model_dir(out, config.to_hf_dict(), {name: tensors[name] for name in used.values()})
        tokenizer.save_pretrained(out)
    except OSError as e:
        raise OfficialFileError(f"{out}: cannot write the converted oracle there: {e.strerror or e}") from None
    return out
