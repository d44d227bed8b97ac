"""Load and save models in Hugging Face format: one call each, any size of a supported family."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from archer_jax.models import hub
from archer_jax.models.config import HFConfig
from archer_jax.models.gpt2 import model as gpt2_model
from archer_jax.models.gpt2 import weights as gpt2_weights
from archer_jax.models.layers import DType
from archer_jax.models.llama import model as llama_model
from archer_jax.models.llama import weights as llama_weights
from archer_jax.models.roberta import model as roberta_model
from archer_jax.models.roberta import weights as roberta_weights
from archer_jax.models.t5 import model as t5_model
from archer_jax.models.t5 import weights as t5_weights
from archer_jax.models.weight_rules import MappingError, check_names, convert, ours_to_hf
from archer_jax.runtime import sharding as shd

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What it takes to load one ``model_type``: its config, module and weight mapping."""

    config_cls: type[HFConfig]
    module_cls: type[nnx.Module]
    weights: ModuleType  # rules(config), canonical_name(name), IGNORED; optionally fit_to_tensors(config, tensors)


ARCHITECTURES: dict[str, Architecture] = {
    "gpt2": Architecture(gpt2_model.GPT2Config, gpt2_model.GPT2LMHeadModel, gpt2_weights),
    "roberta": Architecture(roberta_model.RobertaConfig, roberta_model.RobertaModel, roberta_weights),
    "t5": Architecture(t5_model.T5Config, t5_model.T5ForConditionalGeneration, t5_weights),
    **{
        name: Architecture(config_cls, llama_model.LlamaForCausalLM, llama_weights)
        for name, config_cls in llama_model.FAMILY.items()
    },
}
# Causal LMs the policy may be: each one works with the sampler and the learners.
CAUSAL_LM_TYPES = ("gpt2", *llama_model.FAMILY)


def _architecture_of(model: nnx.Module) -> Architecture:
    arch = ARCHITECTURES.get(getattr(getattr(model, "config", None), "model_type", None))
    if arch is None or not isinstance(model, arch.module_cls):
        raise TypeError(f"cannot save a {type(model).__name__}: known models are {sorted(ARCHITECTURES)}")
    return arch


def load_pretrained(
    name_or_path: str | os.PathLike,
    *,
    model_type: str | Sequence[str] | None = None,
    dtype: DType = jnp.float32,
    param_dtype: DType = jnp.float32,
    remat: str = "none",
    seed: int = 0,
    mesh: Mesh | None = None,
    rules: shd.Rules = shd.DEFAULT_RULES,
) -> nnx.Module:
    """Loads a model from a hub name (``gpt2``, ``roberta-base``, ``mistralai/Mistral-7B-v0.1``)
    or an HF-format directory.

    Args:
      model_type: the expected ``model_type`` of ``config.json`` (``gpt2`` / ``roberta`` /
        ``llama`` ...), or several; a directory of another architecture is an error. None
        accepts any known one.
      dtype: compute dtype (bfloat16 for speed; logits stay float32).
      param_dtype: dtype of the parameters.
      remat: activation checkpointing of the layers in training passes (``none``, ``dots``, ``full``).
      seed: initialises parameters the checkpoint lacks (e.g. roberta-base's pooler).
      mesh: place each parameter straight into its sharding over ``mesh`` (by its logical axes
        and ``rules``). Tensors are read and converted one at a time, so no host ever holds the
        whole model; each device receives only its shard.

    Raises:
      ModelLoadError: one line naming the model or path that could not be loaded.
    """
    directory = hub.resolve(name_or_path)
    config_dict = hub.read_config(directory)
    found = config_dict.get("model_type")
    expected = (model_type,) if isinstance(model_type, str) else model_type
    if expected is not None and found not in expected:
        raise hub.ModelLoadError(
            f"{directory / hub.CONFIG} describes a {found!r} model, not {' or '.join(map(repr, expected))}"
        )
    if found not in ARCHITECTURES:
        raise hub.ModelLoadError(
            f"{directory / hub.CONFIG} has model_type {found!r}; supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    arch = ARCHITECTURES[found]
    try:
        config = arch.config_cls.from_hf_dict(config_dict)
    except (TypeError, ValueError) as e:
        raise hub.ModelLoadError(f"{directory / hub.CONFIG}: {e}") from None
    tensors = hub.WeightReader(directory)
    if hasattr(arch.weights, "fit_to_tensors"):  # a config that the weights complete (T5's LM head)
        config = arch.weights.fit_to_tensors(config, tensors)
    mapping = arch.weights.rules(config)
    try:
        names, absent, unused = check_names(mapping, tensors, arch.weights.canonical_name)
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
    variables = dict(nnx.to_flat_state(state))
    shardings = dict(nnx.to_flat_state(shd.state_shardings(state, mesh, rules))) if mesh is not None else {}
    values: dict[tuple, jax.Array] = {}
    for rule in mapping:
        if rule.hf not in names:
            continue
        try:
            converted = convert(rule, tensors[names[rule.hf]])
        except MappingError as e:
            raise hub.ModelLoadError(f"{directory}: {e}") from None
        for path, value in zip(rule.ours, converted, strict=True):
            variable = variables.get(path)
            where = "/".join(map(str, path))
            if variable is None:
                raise hub.ModelLoadError(f"{directory}: tensor {rule.hf} maps to {where}, which the model lacks")
            if tuple(value.shape) != tuple(variable.shape):
                raise hub.ModelLoadError(
                    f"{directory}: parameter {where} has shape {tuple(variable.shape)} "
                    f"in the model built from {hub.CONFIG}, but the checkpoint gives {tuple(value.shape)}"
                )
            values[path] = _place(value, param_dtype, shardings.get(path))
    filled = []
    for path, variable in variables.items():
        if path in values:
            filled.append((path, variable.replace(values[path])))
        elif absent:
            filled.append((path, variable if path not in shardings else variable.replace(jax.device_put(variable.get_value(), shardings[path]))))
        else:
            raise hub.ModelLoadError(f"{directory}: no tensor maps to parameter {'/'.join(map(str, path))}")
    return nnx.merge(graphdef, nnx.from_flat_state(filled))


def _place(value: np.ndarray, dtype: DType, sharding: jax.sharding.Sharding | None) -> jax.Array:
    """``value`` as a ``dtype`` array, on ``sharding`` when given (each device gets its shard only,
    cast on the host shard by shard), else on the default device."""
    if sharding is None:
        return jnp.asarray(value, dtype=dtype)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: np.asarray(value[index], dtype=dtype))


def load_gpt2(name_or_path: str | os.PathLike, **kwargs: Any) -> gpt2_model.GPT2LMHeadModel:
    """:func:`load_pretrained` for a GPT-2 causal LM."""
    return load_pretrained(name_or_path, model_type="gpt2", **kwargs)


def load_causal_lm(name_or_path: str | os.PathLike, **kwargs: Any) -> nnx.Module:
    """:func:`load_pretrained` for any causal LM the sampler and learners take (:data:`CAUSAL_LM_TYPES`)."""
    return load_pretrained(name_or_path, model_type=CAUSAL_LM_TYPES, **kwargs)


def load_roberta(name_or_path: str | os.PathLike, **kwargs: Any) -> roberta_model.RobertaModel:
    """:func:`load_pretrained` for a RoBERTa encoder."""
    return load_pretrained(name_or_path, model_type="roberta", **kwargs)


def load_t5(name_or_path: str | os.PathLike, **kwargs: Any) -> t5_model.T5ForConditionalGeneration:
    """:func:`load_pretrained` for a T5 encoder-decoder (flan-t5: the paper's oracles)."""
    return load_pretrained(name_or_path, model_type="t5", **kwargs)


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
    "load_causal_lm",
    "load_roberta",
    "load_t5",
    "save_pretrained",
    "params_as_numpy",
]
