"""Mapping between Hugging Face tensor names and our parameter paths, in both directions.

A model's mapping is a list of :class:`Rule`: one HF tensor <-> one or more of our parameters
(GPT-2's fused ``c_attn`` becomes query/key/value). The per-model rule lists live beside each
model (``gpt2/weights.py``, ``roberta/weights.py``); this module applies them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

ParamPath = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class Rule:
    """HF tensor ``hf`` <-> our parameters ``ours``.

    ``to_ours(hf_array)`` returns one array per path in ``ours``; ``to_hf(*our_arrays)`` is its
    inverse. ``optional``: a checkpoint may lack the tensor (e.g. roberta-base has no pooler);
    the parameter then keeps its fresh initialisation.
    """

    hf: str
    ours: tuple[ParamPath, ...]
    to_ours: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    to_hf: Callable[..., np.ndarray]
    optional: bool = False


def copy(hf: str, ours: ParamPath, optional: bool = False) -> Rule:
    """The same array on both sides."""
    return Rule(hf, (ours,), lambda w: (w,), lambda w: w, optional)


def reshaped(hf: str, ours: ParamPath, our_shape: Sequence[int], hf_shape: Sequence[int]) -> Rule:
    """The same values in the same order, ``hf_shape`` on the HF side and ``our_shape`` on ours."""
    return Rule(hf, (ours,), lambda w: (w.reshape(our_shape),), lambda w: w.reshape(hf_shape))


def torch_linear(
    hf: str, ours: ParamPath, in_shape: Sequence[int], out_shape: Sequence[int], optional: bool = False
) -> list[Rule]:
    """A ``torch.nn.Linear`` (weight ``[out, in]``) <-> our kernel ``[*in_shape, *out_shape]`` and bias."""
    kernel_shape, in_size = (*in_shape, *out_shape), int(np.prod(in_shape))
    return [
        Rule(
            f"{hf}.weight",
            ((*ours, "kernel"),),
            lambda w: (w.T.reshape(kernel_shape),),
            lambda k: k.reshape(in_size, -1).T,
            optional,
        ),
        Rule(f"{hf}.bias", ((*ours, "bias"),), lambda b: (b.reshape(out_shape),), lambda b: b.reshape(-1), optional),
    ]


def layer_norm(hf: str, ours: ParamPath) -> list[Rule]:
    """A LayerNorm: HF ``weight``/``bias`` <-> our ``scale``/``bias``."""
    return [copy(f"{hf}.weight", (*ours, "scale")), copy(f"{hf}.bias", (*ours, "bias"))]


class MappingError(ValueError):
    """The checkpoint's tensors do not fit the model (missing names or wrong shapes)."""


def check_names(
    rules: Iterable[Rule], names: Iterable[str], canonical_name: Callable[[str], str] = lambda name: name
) -> tuple[dict[str, str], list[str], list[str]]:
    """Which checkpoint tensor each rule reads, before any is read.

    Returns ``{rule name: checkpoint name}``, the optional tensors that are absent, and the
    checkpoint tensors no rule uses. Raises :class:`MappingError` naming the first required
    tensors absent.
    """
    present = {canonical_name(name): name for name in names}
    found, missing, absent_optional = {}, [], []
    for rule in rules:
        if rule.hf in present:
            found[rule.hf] = present[rule.hf]
        else:
            (absent_optional if rule.optional else missing).append(rule.hf)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise MappingError(f"missing tensors {shown}")
    return found, absent_optional, sorted(set(present) - set(found))


def convert(rule: Rule, tensor: np.ndarray) -> tuple[np.ndarray, ...]:
    """``rule.to_ours(tensor)``, with a :class:`MappingError` naming the tensor if it does not fit."""
    try:
        return tuple(rule.to_ours(tensor))
    except ValueError:
        raise MappingError(
            f"tensor {rule.hf} has shape {tuple(tensor.shape)}, which does not fit the model built from the config"
        ) from None


def hf_to_ours(
    rules: Iterable[Rule],
    tensors: Mapping[str, np.ndarray],
    canonical_name: Callable[[str], str] = lambda name: name,
) -> tuple[dict[ParamPath, np.ndarray], list[str], list[str]]:
    """Converts HF ``tensors`` to our parameters.

    ``canonical_name`` maps a checkpoint's tensor name to the name the rules use (checkpoints
    of different HF classes prefix names differently: ``transformer.``, ``roberta.``).
    Returns the parameters, the optional tensors that were absent, and the checkpoint tensors
    no rule used. Raises :class:`MappingError` naming the first required tensors absent.
    """
    rules = list(rules)
    found, absent_optional, unused = check_names(rules, tensors, canonical_name)
    ours: dict[ParamPath, np.ndarray] = {}
    for rule in rules:
        if rule.hf in found:
            ours.update(zip(rule.ours, convert(rule, tensors[found[rule.hf]]), strict=True))
    return ours, absent_optional, unused


def ours_to_hf(rules: Iterable[Rule], params: Mapping[ParamPath, np.ndarray]) -> dict[str, np.ndarray]:
    """Converts our parameters to HF tensors (contiguous arrays)."""
    return {rule.hf: np.ascontiguousarray(rule.to_hf(*(params[path] for path in rule.ours))) for rule in rules}
