"""The official ArCHer critic's tensors <-> our :class:`~archer_jax.learners.critic.DoubleCritic`.

The official trainer saves ``critic_state_dict`` and ``target_critic_state_dict``: each a
``DoubleCritic`` of a RoBERTa ``base_lm`` and four heads ``critic1``, ``critic2`` (on the
observation and action embeddings side by side) and ``v_critic1``, ``v_critic2`` (on the
observation's), each ``nn.Sequential(Linear(in, d), ReLU, Linear(d, d), ReLU, Linear(d, 1))``: the
linears are its entries 0, 2 and 4. Ours is the same network: the encoder is ``encoder``, the heads
``q1, q2, v1, v2`` with ``fc1, fc2, out``. :func:`params` turns a state dict (with a name prefix,
e.g. ``"critic."``) into parameters shaped like a critic's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flax import nnx

from archer_jax.models.roberta import weights as roberta_weights
from archer_jax.models.roberta.model import RobertaConfig
from archer_jax.models.weight_rules import MappingError, Rule, hf_to_ours, torch_linear

HEADS = {"critic1": "q1", "critic2": "q2", "v_critic1": "v1", "v_critic2": "v2"}
LAYERS = (("0", "fc1"), ("2", "fc2"), ("4", "out"))


def rules(config: RobertaConfig, prefix: str = "") -> list[Rule]:
    """The mapping of a critic whose encoder has ``config``; official names start with ``prefix``."""
    out = [Rule(prefix + "base_lm." + r.hf, tuple(("encoder", *p) for p in r.ours), r.to_ours, r.to_hf, r.optional)
           for r in roberta_weights.rules(config)]
    d = config.hidden_size
    for official, ours in HEADS.items():
        widths = ((2 * d if ours.startswith("q") else d, d), (d, d), (d, 1))
        for (index, layer), (i, o) in zip(LAYERS, widths):
            out += torch_linear(f"{prefix}{official}.{index}", (ours, layer), (i,), (o,))
    return out


def converted(tensors: Mapping[str, np.ndarray], config: RobertaConfig, prefix: str = "") -> dict[tuple, np.ndarray]:
    """The critic's parameters (by path) from the official tensors. Raises :class:`MappingError`
    naming the tensors a critic needs that are missing, or one whose shape does not fit."""
    values, absent, _ = hf_to_ours(rules(config, prefix), tensors)
    if absent:  # the pooler is optional in RoBERTa files, never in a critic that reads pooler outputs
        raise MappingError(f"missing tensors {', '.join(absent[:3])}")
    return values


def params(tensors: Mapping[str, np.ndarray], template: nnx.State, config: RobertaConfig, prefix: str = "") -> nnx.State:
    """``template`` (a critic's parameters) with every leaf replaced by the official tensor that
    maps to it. Raises :class:`MappingError` naming missing tensors or a shape that does not fit."""
    values = converted(tensors, config, prefix)
    filled = []
    for path, leaf in nnx.to_flat_state(template):
        where = "/".join(map(str, path))
        if path not in values:
            raise MappingError(f"no official tensor maps to critic parameter {where}")
        value = values[path]
        current = leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf
        if tuple(value.shape) != tuple(current.shape):
            raise MappingError(f"critic parameter {where} has shape {tuple(current.shape)}, "
                               f"the official tensor gives {tuple(value.shape)}")
        value = np.asarray(value, dtype=current.dtype)
        filled.append((path, leaf.replace(value) if isinstance(leaf, nnx.Variable) else value))
    return nnx.from_flat_state(filled)

