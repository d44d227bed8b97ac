"""Rotary position embeddings (RoPE) as Hugging Face's Llama family computes them.

Frequencies ``inv_freq[i] = theta^(-2i/d)`` for ``i < d/2``, optionally rescaled (``linear``:
all divided by ``factor``; ``llama3``: Llama 3.1's piecewise rule that divides the low frequencies
by ``factor``, keeps the high ones, and blends in between). A position ``p`` rotates each pair
``(x[i], x[i + d/2])`` by the angle ``p · inv_freq[i]`` (the "rotate half" layout of HF
checkpoints, not the interleaved layout of Meta's original code).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """The rescaling of a ``config.json``'s ``rope_scaling`` / ``rope_parameters`` (hashable)."""

    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self):
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"rope_type {self.rope_type!r} is not supported; supported: {', '.join(ROPE_TYPES)}")

    @classmethod
    def from_hf(cls, scaling: dict[str, Any] | None) -> "RopeScaling":
        """From HF's ``rope_scaling`` or ``rope_parameters`` dict (``type`` is the older key)."""
        if not scaling:
            return cls()
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        names = {f.name for f in dataclasses.fields(cls)} - {"rope_type"}
        return cls(rope_type=kind, **{k: v for k, v in scaling.items() if k in names and v is not None})

    def to_hf(self) -> dict[str, Any] | None:
        """HF's ``rope_scaling`` dict, or None for unscaled RoPE."""
        if self.rope_type == "default":
            return None
        if self.rope_type == "linear":
            return {"rope_type": "linear", "factor": self.factor}
        return {"rope_type": self.rope_type, **{k: v for k, v in dataclasses.asdict(self).items() if k != "rope_type"}}


def inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling = RopeScaling()) -> np.ndarray:
    """``[head_dim // 2]`` float32 inverse frequencies (NumPy: computed once, at trace time)."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim))
    if scaling.rope_type == "linear":
        return (inv_freq / scaling.factor).astype(np.float32)
    if scaling.rope_type == "llama3":
        low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
        high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
        smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
            scaling.high_freq_factor - scaling.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    return inv_freq.astype(np.float32)


def apply_rotary(x: Array, positions: Array, inv_freq: np.ndarray) -> Array:
    """``x`` (``[batch, len, heads, head_dim]``) rotated by ``positions`` (``[batch, len]``), with
    the angles in float32 (as HF does), the result in ``x``'s dtype."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [b, len, d/2]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1)[:, :, None, :].astype(x.dtype)
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1)[:, :, None, :].astype(x.dtype)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin
