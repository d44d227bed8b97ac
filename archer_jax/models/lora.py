"""LoRA (low-rank adapters) as a transform of a model, in PEFT's adapter format.

    model = models.load_causal_lm("Qwen/Qwen2-0.5B")
    apply_lora(model, LoRAConfig(rank=16, targets=("q_proj", "v_proj")), rngs=nnx.Rngs(0))
    adapters, rest = nnx.split(model, trainable_filter, ...)  # what a learner differentiates
    save_peft(model, "out/adapter")                            # peft.PeftModel.from_pretrained reads it
    plain = merged_copy(model)                                 # W + scale * A @ B, for export/sampling

Each targeted ``nnx.LinearGeneral`` (named as in PEFT's ``target_modules``: the last component of
the Hugging Face module name, e.g. ``q_proj``) is replaced in its parent by a :class:`LoRADense`
that keeps it as ``base`` and adds ``lora_a`` / ``lora_b`` (:class:`flax.nnx.LoRAParam`, a subclass
of ``nnx.Param``, always float32). The layers are found through the model's weight rules
(``ARCHITECTURES[model_type].weights.rules``), which also name each adapter in the PEFT files.

Dropout (PEFT's ``lora_dropout``, on the adapter's input only) is off unless all three hold: the
config's ``dropout`` > 0 (apply_lora then gives each layer's ``nnx.Dropout`` an RNG stream forked
from its ``rngs``), and the model is used through a training view,
``nnx.view(model, only=nnx.Dropout, deterministic=False)``. Plain calls are deterministic. The
stream's counter is model state (``nnx.RngState``): a jitted step must carry it out to draw fresh
masks each step.

A model with adapters is not what ``save_pretrained`` writes: save its :func:`merged_copy`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import load_file, save_file

from archer_jax.models import pretrained
from archer_jax.models.hub import ModelLoadError
from archer_jax.models.weight_rules import ParamPath
from archer_jax.runtime.config_keys import key

log = logging.getLogger(__name__)

Array = jax.Array

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."

trainable_filter = nnx.LoRAParam
"""The variables a learner differentiates and optimizes in a model with adapters: the LoRA A/B
matrices (``nnx.split(model, trainable_filter, ...)``); the base weights stay frozen."""


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Adapter rank (0 = no adapters: every weight trains), ``alpha`` (the update is scaled by
    ``alpha / rank``), PEFT's ``lora_dropout`` and the targeted modules (PEFT ``target_modules``
    names, e.g. ``q_proj``), as a sequence or one comma-separated string (``config.model.lora``).

    ``targets`` is kept in its comma-separated form, so a config and a model's adapters compare
    equal whichever form they were given in; :meth:`target_names` is the tuple.
    """

    rank: int = key(
        0, "LoRA rank on the policy's projections (0 = off: every weight trains)", official="`use_lora` (r 16)")
    alpha: float = key(32.0, "LoRA scale numerator: adapters add (alpha / rank) * x A B", official="`lora_alpha` (32)")
    dropout: float = key(
        0.0, "LoRA dropout on the adapters' input in training steps (PEFT's lora_dropout)",
        official="`lora_dropout` (0.05)")
    targets: str | tuple[str, ...] = key(
        "q_proj,k_proj,v_proj,o_proj", "comma-separated projections (PEFT names: "
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)", official="`target_modules` (q/k/v/o)")

    def __post_init__(self):
        names = self.targets.split(",") if isinstance(self.targets, str) else list(self.targets)
        object.__setattr__(self, "targets", ",".join(n.strip() for n in names if n.strip()))
        if not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"rank: must be >= 0 (an integer; 0 = off), got {self.rank!r}")
        if not self.rank:
            return
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"alpha: must be > 0, got {self.alpha!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout!r}")
        if not self.targets:
            raise ValueError("targets: name at least one projection (e.g. q_proj,v_proj)")

    def target_names(self) -> tuple[str, ...]:
        """The targeted module names, in order."""
        return tuple(self.targets.split(",")) if self.targets else ()

    @property
    def scale(self) -> float:
        """``alpha / rank``: what multiplies ``A @ B``."""
        return self.alpha / self.rank


class LoRADense(nnx.Module):
    """``base(x) + scale * dropout(x) @ A @ B`` around a dense layer ``base``.

    ``lora_a`` is ``[*in_shape, rank]`` (PEFT's kaiming-uniform init, bound ``1/sqrt(fan_in)``),
    ``lora_b`` ``[rank, *out_shape]`` (zeros), both float32 ``nnx.LoRAParam`` with the base
    kernel's logical axis names (None on the rank axis). The adapter path runs in the base
    layer's compute dtype. A :meth:`merge`-d layer holds ``W + scale * A @ B`` in its kernel and
    skips the adapter path. ``dropout`` applies only in a training view with an RNG stream (see
    the module docstring); plain calls are deterministic.
    """

    def __init__(self, base: nnx.LinearGeneral, *, rank: int, alpha: float, dropout: float = 0.0,
                 rngs: nnx.Rngs, dropout_rngs: nnx.Rngs | None = None):
        n_in = len(base.in_features)
        if base.batch_axis or tuple(base.axis) != tuple(range(-n_in, 0)):
            raise ValueError(f"LoRADense needs a layer contracting its input's last {n_in} axes, got axis={base.axis}")
        self.base = base
        self.rank, self.alpha, self.dropout_rate = rank, float(alpha), float(dropout)
        self.scale = self.alpha / rank
        self.merged = False
        in_shape, out_shape = tuple(base.in_features), tuple(base.out_features)
        meta = base.kernel.get_metadata()
        names = meta.get("out_sharding") or meta.get("sharding_names")
        a_meta = {"out_sharding": (*names[:n_in], None), "eager_sharding": False} if names else {}
        b_meta = {"out_sharding": (None, *names[n_in:]), "eager_sharding": False} if names else {}
        bound = 1.0 / math.sqrt(math.prod(in_shape))
        a = jax.random.uniform(rngs.params(), (*in_shape, rank), jnp.float32, -bound, bound)
        self.lora_a = nnx.LoRAParam(a, **a_meta)
        self.lora_b = nnx.LoRAParam(jnp.zeros((rank, *out_shape), jnp.float32), **b_meta)
        self.dropout = nnx.Dropout(self.dropout_rate, deterministic=True, rngs=dropout_rngs)

    def delta(self) -> Array:
        """``scale * A @ B`` as a float32 kernel ``[*in_shape, *out_shape]``."""
        return self.scale * jnp.tensordot(self.lora_a[...], self.lora_b[...], axes=1, precision=self.base.precision)

    def __call__(self, x: Array) -> Array:
        y = self.base(x)
        if self.merged:
            return y
        dtype = self.base.dtype or y.dtype
        h = self.dropout(x).astype(dtype)
        n_in = len(self.base.in_features)
        a, b = self.lora_a[...].astype(dtype), self.lora_b[...].astype(dtype)
        update = jnp.tensordot(jnp.tensordot(h, a, axes=n_in, precision=self.base.precision), b, axes=1,
                               precision=self.base.precision)
        return y + (self.scale * update).astype(y.dtype)

    def merge(self) -> None:
        """Folds ``scale * A @ B`` into the base kernel (in place); the adapter path is then skipped."""
        if not self.merged:
            kernel = self.base.kernel
            kernel.set_value((kernel[...].astype(jnp.float32) + self.delta()).astype(kernel.dtype))
            self.merged = True

    def unmerge(self) -> None:
        """Undoes :meth:`merge`, up to rounding (float32: ~1e-7 relative; bfloat16 kernels lose more)."""
        if self.merged:
            kernel = self.base.kernel
            kernel.set_value((kernel[...].astype(jnp.float32) - self.delta()).astype(kernel.dtype))
            self.merged = False


def _node(root: object, path: ParamPath) -> object:
    for part in path:
        root = root[part] if isinstance(part, int) else getattr(root, part)
    return root


def _replace(root: object, path: ParamPath, new: object) -> None:
    parent, last = _node(root, path[:-1]), path[-1]
    if isinstance(last, int):
        parent[last] = new
    else:
        setattr(parent, last, new)


def _dense_modules(model: nnx.Module) -> dict[str, ParamPath]:
    """``{HF module name: our module path}`` of every dense layer a weight rule maps one-to-one."""
    arch = pretrained.ARCHITECTURES.get(getattr(getattr(model, "config", None), "model_type", None))
    if arch is None or not isinstance(model, arch.module_cls):
        raise TypeError(f"LoRA needs a model of a known architecture ({', '.join(sorted(pretrained.ARCHITECTURES))}), "
                        f"got a {type(model).__name__}")
    return {
        rule.hf[: -len(".weight")]: rule.ours[0][:-1]
        for rule in arch.weights.rules(model.config)
        if rule.hf.endswith(".weight") and len(rule.ours) == 1 and rule.ours[0][-1] == "kernel"
    }


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def lora_modules(model: nnx.Module) -> dict[str, ParamPath]:
    """``{HF module name: our module path}`` of the model's :class:`LoRADense` layers, in rule order."""
    out = {}
    for name, path in _dense_modules(model).items():
        try:
            if isinstance(_node(model, path), LoRADense):
                out[name] = path
        except (AttributeError, IndexError, TypeError):
            continue
    return out


def lora_config(model: nnx.Module) -> LoRAConfig | None:
    """The config the model's adapters were applied with; None when it has none."""
    modules = lora_modules(model)
    if not modules:
        return None
    layer = _node(model, next(iter(modules.values())))
    targets = tuple(dict.fromkeys(_last(name) for name in modules))
    return LoRAConfig(layer.rank, layer.alpha, layer.dropout_rate, targets)


def _targeted(model: nnx.Module, config: LoRAConfig) -> dict[str, ParamPath]:
    """``{HF module name: our path}`` of the layers ``config.targets`` names, or a ValueError."""
    available = _dense_modules(model)
    for target in config.target_names():
        if not any(_last(name) == target for name in available):
            names = ", ".join(dict.fromkeys(_last(name) for name in available))
            raise ValueError(f"LoRA target {target!r} matches no layer; available: {names}")
    out = {name: path for name, path in available.items() if _last(name) in config.target_names()}
    for name, path in out.items():
        layer = _node(model, path)
        if not isinstance(layer, (nnx.LinearGeneral, LoRADense)):
            raise ValueError(f"LoRA target {name} is a {type(layer).__name__}, not a dense layer")
    return out


def apply_lora(model: nnx.Module, config: LoRAConfig, *, rngs: nnx.Rngs) -> list[str]:
    """Wraps every layer ``config.targets`` names in a :class:`LoRADense`, in place.

    Returns the HF module names wrapped (``model.layers.0.self_attn.q_proj``, ...). Raises a
    ValueError naming a target that matches no layer, or when the model already has adapters.
    """
    if not config.rank:
        raise ValueError("rank: 0 means no adapters; give apply_lora a rank >= 1")
    if lora_modules(model):
        raise ValueError("the model already has LoRA adapters; apply_lora once (or merged_copy it first)")
    targeted = _targeted(model, config)
    dropout_rngs = rngs if config.dropout > 0 else None
    for path in targeted.values():
        layer = LoRADense(_node(model, path), rank=config.rank, alpha=config.alpha, dropout=config.dropout, rngs=rngs,
                          dropout_rngs=dropout_rngs)
        _replace(model, path, layer)
    log.info("LoRA rank %d on %d layers (%s)", config.rank, len(targeted), ", ".join(config.target_names()))
    return list(targeted)


def merged_copy(model: nnx.Module) -> nnx.Module:
    """A copy of ``model`` without adapters whose kernels are ``W + scale * A @ B``; ``model`` is unchanged."""
    out = nnx.clone(model)
    for path in lora_modules(out).values():
        layer = _node(out, path)
        layer.merge()
        _replace(out, path, layer.base)
    return out


def save_peft(model: nnx.Module, directory: str | os.PathLike, *, base_model_name_or_path: str = "") -> Path:
    """Writes the adapters as a PEFT LoRA directory (``adapter_config.json``,
    ``adapter_model.safetensors``, float32) that ``peft.PeftModel.from_pretrained`` reads."""
    config = lora_config(model)
    if config is None:
        raise ValueError("the model has no LoRA adapters to save (apply_lora first)")
    tensors = {}
    for name, path in lora_modules(model).items():
        layer = _node(model, path)
        a = np.asarray(jax.device_get(layer.lora_a[...]), np.float32)
        b = np.asarray(jax.device_get(layer.lora_b[...]), np.float32)
        tensors[f"{PEFT_PREFIX}{name}.lora_A.weight"] = np.ascontiguousarray(a.reshape(-1, config.rank).T)
        tensors[f"{PEFT_PREFIX}{name}.lora_B.weight"] = np.ascontiguousarray(b.reshape(config.rank, -1).T)
    peft_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": config.rank, "lora_alpha": config.alpha,
        "lora_dropout": config.dropout, "target_modules": list(config.target_names()), "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "base_model_name_or_path": base_model_name_or_path,
        "init_lora_weights": True, "modules_to_save": None, "use_rslora": False, "use_dora": False,
        "layers_to_transform": None, "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {},
        "revision": None,
    }
    directory = Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ADAPTER_CONFIG).write_text(json.dumps(peft_config, indent=2) + "\n")
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    return directory


# PEFT options whose adapters are not plain ``scale * A @ B`` on the named modules.
_UNSUPPORTED = {"use_rslora": False, "use_dora": False, "rank_pattern": {}, "alpha_pattern": {},
                "layers_to_transform": None, "modules_to_save": None, "bias": "none"}


def _read_peft_config(file: Path) -> LoRAConfig:
    if not file.is_file():
        raise ModelLoadError(f"{file} does not exist: not a PEFT adapter directory")
    try:
        raw = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{file} is not valid JSON: {e}") from None
    if raw.get("peft_type") != "LORA":
        raise ModelLoadError(f"{file} has peft_type {raw.get('peft_type')!r}, not 'LORA'")
    for key, default in _UNSUPPORTED.items():
        if raw.get(key) not in (None, default):
            raise ModelLoadError(f"{file}: {key}={raw[key]!r} is not supported (only {default!r})")
    targets = raw.get("target_modules")
    if not isinstance(targets, list):
        raise ModelLoadError(f"{file}: target_modules must be a list of module names, got {targets!r}")
    for key in ("r", "lora_alpha"):
        if key not in raw:
            raise ModelLoadError(f"{file} lacks {key!r}")
    try:
        return LoRAConfig(raw["r"], float(raw["lora_alpha"]), float(raw.get("lora_dropout", 0.0)), tuple(targets))
    except (TypeError, ValueError) as e:
        raise ModelLoadError(f"{file}: {e}") from None


def load_peft(model: nnx.Module, directory: str | os.PathLike, *, rngs: nnx.Rngs | None = None) -> list[str]:
    """Reads a PEFT LoRA directory (ours or ``peft``'s ``save_pretrained``) into ``model``.

    Applies LoRA with the directory's r/alpha/dropout/targets when the model has none (``rngs``,
    default ``nnx.Rngs(0)``, seeds the dropout stream), else checks they agree; then sets every A
    and B. Returns the HF module names loaded. Raises :class:`ModelLoadError` (a ValueError), one
    line naming the file or tensor, for a missing file, another ``peft_type``, an unsupported
    option, missing or extra tensors, or a wrong shape.
    """
    directory = Path(directory).expanduser()
    config = _read_peft_config(directory / ADAPTER_CONFIG)
    current = lora_config(model)
    if current is not None and (current.rank, current.alpha, current.dropout, set(current.target_names())) != (
            config.rank, config.alpha, config.dropout, set(config.target_names())):
        raise ModelLoadError(f"{directory} holds adapters {config}, but the model has {current}")
    file = directory / ADAPTER_WEIGHTS
    if not file.is_file():
        raise ModelLoadError(f"{file} does not exist: the adapter weights are missing")
    tensors = load_file(str(file))
    canonical = pretrained.ARCHITECTURES[model.config.model_type].weights.canonical_name
    names = {canonical(k.removeprefix(PEFT_PREFIX)): k for k in tensors}  # the rules' names -> the file's
    targeted = _targeted(model, config)
    values: dict[tuple[str, str], np.ndarray] = {}  # everything is checked before the model changes
    for name, path in targeted.items():
        layer = _node(model, path)
        base = layer.base if isinstance(layer, LoRADense) else layer
        in_shape, out_shape = tuple(base.in_features), tuple(base.out_features)
        for which, shape in (("A", (config.rank, math.prod(in_shape))), ("B", (math.prod(out_shape), config.rank))):
            key = f"{name}.lora_{which}.weight"
            if key not in names:
                raise ModelLoadError(f"{file} lacks tensor {PEFT_PREFIX}{key}")
            in_file = names.pop(key)
            value = tensors.pop(in_file)
            if tuple(value.shape) != shape:
                raise ModelLoadError(f"{file}: tensor {in_file} has shape {tuple(value.shape)}, expected {shape}")
            ours = (*in_shape, config.rank) if which == "A" else (config.rank, *out_shape)
            values[name, which] = value.T.reshape(ours)
    if tensors:
        raise ModelLoadError(f"{file} has tensors no adapter of the model takes: {', '.join(sorted(tensors)[:3])}")
    if current is None:
        apply_lora(model, config, rngs=rngs if rngs is not None else nnx.Rngs(0))
    for name, path in targeted.items():
        layer = _node(model, path)
        layer.lora_a.set_value(jnp.asarray(values[name, "A"], jnp.float32))
        layer.lora_b.set_value(jnp.asarray(values[name, "B"], jnp.float32))
    return list(targeted)


__all__ = [
    "LoRAConfig",
    "LoRADense",
    "apply_lora",
    "load_peft",
    "lora_config",
    "lora_modules",
    "merged_copy",
    "save_peft",
    "trainable_filter",
]
