"""Load and save models in Hugging Face format: one call each, any GPT-2 or RoBERTa size."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax.models import hub
from archer_jax.models.config import HFConfig
from archer_jax.models.gpt2 import model as gpt2_model
from archer_jax.models.gpt2 import weights as gpt2_weights
from archer_jax.models.layers import DType
from archer_jax.models.roberta import model as roberta_model
from archer_jax.models.roberta import weights as roberta_weights
from archer_jax.models.weight_rules import MappingError, hf_to_ours, ours_to_hf

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What it takes to load one ``model_type``: its config, module and weight mapping."""

    config_cls: type[HFConfig]
    module_cls: type[nnx.Module]
    weights: ModuleType  # rules(config), canonical_name(name), IGNORED


ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": Architecture(gpt2_model.GPT2Config, gpt2_model.GPT2LMHeadModel, gpt2_weights),
    "roberta": Architecture(roberta_model.RobertaConfig, roberta_model.RobertaModel, roberta_weights),
}


def _architecture_of(model: nnx.Module) -> Architecture:
    for arch in ARCHITECTURES.values():
        if isinstance(model, arch.module_cls):
            return arch
    raise TypeError(f"cannot save a {type(model).__name__}: known models are {sorted(ARCHITECTURES)}")


def load_pretrained(
    name_or_path: str | os.PathLike,
    *,
    model_type: str | None = None,
    dtype: DType = jnp.float32,
    param_dtype: DType = jnp.float32,
    remat: str = "none",
    seed: int = 0,
) -> nnx.Module:
    """Loads a model from a hub name (``gpt2``, ``roberta-base``) or an HF-format directory.

    Args:
      model_type: the expected ``model_type`` of ``config.json`` (``gpt2`` / ``roberta``);
        a directory of another architecture is an error. None accepts any known one.
      dtype: compute dtype (bfloat16 for speed; logits stay float32).
      param_dtype: dtype of the parameters.
      remat: activation checkpointing of the layers in training passes (``none``, ``dots``, ``full``).
      seed: initialises parameters the checkpoint lacks (e.g. roberta-base's pooler).

    Raises:
      ModelLoadError: one line naming the model or path that could not be loaded.
    """
    directory = hub.resolve(name_or_path)
    config_dict = hub.read_config(directory)
    found = config_dict.get("model_type")
    if model_type is not None and found != model_type:
        raise hub.ModelLoadError(
            f"{directory / hub.CONFIG} describes a {found!r} model, not {model_type!r}"
        )
    if found not in ARCHITECTURES:
        raise hub.ModelLoadError(
            f"{directory / hub.CONFIG} has model_type {found!r}; supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    arch = ARCHITECTURES[found]
    config = arch.config_cls.from_hf_dict(config_dict)
    tensors = hub.read_weights(directory)
    try:
        params, absent, unused = hf_to_ours(arch.weights.rules(config), tensors, arch.weights.canonical_name)
    except MappingError as e:
        raise hub.ModelLoadError(f"{directory}: {e}") from None
    unused = [n for n in unused if not any(pattern in n for pattern in arch.weights.IGNORED)]
    if unused:
        log.warning("%s: ignoring %d tensors the model does not use: %s", directory, len(unused), ", ".join(unused[:5]))

    def build(rngs: nnx.Rngs) -> nnx.Module:
        return arch.module_cls(config, dtype=dtype, param_dtype=param_dtype, remat=remat, rngs=rngs)

    if absent:
        log.warning("%s lacks %s; those parameters are freshly initialised (seed %d)", directory, ", ".join(absent), seed)
        template = build(nnx.Rngs(seed))
    else:
        template = nnx.eval_shape(lambda: build(nnx.Rngs(seed)))
    graphdef, state = nnx.split(template)
    filled = []
    for path, variable in nnx.to_flat_state(state):
        value = params.get(path)
        if value is None:
            if not absent:
                raise hub.ModelLoadError(f"{directory}: no tensor maps to parameter {'/'.join(map(str, path))}")
            filled.append((path, variable))
            continue
        if tuple(value.shape) != tuple(variable.shape):
            raise hub.ModelLoadError(
                f"{directory}: parameter {'/'.join(map(str, path))} has shape {tuple(variable.shape)} "
                f"in the model built from {hub.CONFIG}, but the checkpoint gives {tuple(value.shape)}"
            )
        filled.append((path, variable.replace(jnp.asarray(value, dtype=param_dtype))))
    return nnx.merge(graphdef, nnx.from_flat_state(filled))


def load_gpt2(name_or_path: str | os.PathLike, **kwargs: Any) -> gpt2_model.GPT2LMHeadModel:
    """:func:`load_pretrained` for a GPT-2 causal LM."""
    return load_pretrained(name_or_path, model_type="gpt2", **kwargs)


def load_roberta(name_or_path: str | os.PathLike, **kwargs: Any) -> roberta_model.RobertaModel:
    """:func:`load_pretrained` for a RoBERTa encoder."""
    return load_pretrained(name_or_path, model_type="roberta", **kwargs)


def params_as_numpy(model: nnx.Module) -> dict[tuple, np.ndarray]:
    """The model's parameters as host NumPy arrays, keyed by parameter path."""
    return {path: np.asarray(jax.device_get(v.get_value())) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def save_pretrained(model: nnx.Module, path: str | os.PathLike, *, tokenizer: Any | None = None) -> Path:
    """Writes ``model`` (and ``tokenizer``, if given) as a Hugging Face directory.

    Hugging Face's PyTorch class (``GPT2LMHeadModel`` / ``RobertaModel``) and
    :func:`load_pretrained` both read it. Weights keep the model's parameter dtype.
    """
    arch = _architecture_of(model)
    config: HFConfig = model.config
    tensors = ours_to_hf(arch.weights.rules(config), params_as_numpy(model))
    dtypes = {str(t.dtype) for t in tensors.values()}
    hf_config = {**config.to_hf_dict(), "dtype": dtypes.pop() if len(dtypes) == 1 else "float32"}
    directory = Path(path).expanduser()
    hub.write_model_dir(directory, hf_config, tensors)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory


__all__: list[str] = [
    "ARCHITECTURES",
    "load_pretrained",
    "load_gpt2",
    "load_roberta",
    "save_pretrained",
    "params_as_numpy",
]
