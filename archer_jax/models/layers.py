"""Parameterised layers shared by the models, each parameter tagged with logical axis names.

Logical names (``vocab``, ``embed``, ``heads``, ``kv``, ``mlp``, ``positions``) are metadata
only: ``archer_jax.runtime.sharding`` maps them onto mesh axes. Variables are created unsharded
(``eager_sharding=False``) so a model can be built with or without a mesh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import jax
import jax.numpy as jnp
from flax import nnx

Array = jax.Array
DType = jnp.dtype | type
Layer = TypeVar("Layer", bound=nnx.Module)

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    # Hugging Face names. "gelu_new" / "gelu_pytorch_tanh" are the tanh approximation.
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_fast": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
}


def activation(name: str) -> Callable[[Array], Array]:
    """Returns the activation function that Hugging Face calls ``name``."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(
            f"activation {name!r} is not supported; known: {', '.join(sorted(ACTIVATIONS))}"
        ) from None


# Activation checkpointing (``config.model.remat``) of each layer in :func:`scan_layers`: what the
# backward pass keeps from the forward, the rest it recomputes. Forward-only calls (sampling, the
# target critic) are unaffected.
REMAT_POLICIES: dict[str, Callable | None] = {
    "none": None,  # keep every activation the backward needs
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,  # keep the projections' outputs
    "full": jax.checkpoint_policies.nothing_saveable,  # keep each layer's input only
}


def check_remat(remat: str) -> str:
    """``remat`` if it names a policy in :data:`REMAT_POLICIES`, else a ValueError listing them."""
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat must be one of {', '.join(REMAT_POLICIES)}, got {remat!r}")
    return remat


# The fewest layers that :func:`scan_layers` scans over. Measured in the actor program (forward
# and backward) on a 2-core x86-64: a 2-block GPT-2 ran 15% slower as a scan, a 12-block one 12%
# faster (benchmarks/variants.py).
SCAN_MIN_LAYERS = 4


def scan_layers(
    layers: Sequence[Layer],
    x: Array,
    call: Callable[[Layer, Array], Array],
    *,
    min_layers: int | None = None,
    remat: str = "none",
) -> Array:
    """``x`` through ``call(layer, x)`` for each layer in turn: one ``lax.scan`` over the layers'
    stacked parameters when there are at least ``min_layers`` (default :data:`SCAN_MIN_LAYERS`)
    and they share one graph, else a Python loop. Same values, same gradients. ``remat`` names an
    activation-checkpointing policy (:data:`REMAT_POLICIES`) applied to each layer.

    For pre-LN stacks (GPT-2): in the scan, XLA keeps each layer's input and the residual
    stream's gradient in memory. With the loop, XLA:CPU fused that gradient (a chain of adds
    through every layer above) into each of its consumers, recomputing the chain once per layer:
    in GPT-2-124M's actor step the scan is 12% faster (benchmarks/README.md, "Speed work").
    Post-LN stacks (RoBERTa) have no such chain, and there the loop was faster. Stacking copies
    the parameters once per call: callers that step one token at a time (KV-cache decoding)
    should loop.
    """
    min_layers = SCAN_MIN_LAYERS if min_layers is None else min_layers
    splits = [nnx.split(layer) for layer in layers]
    graphdef = splits[0][0] if splits else None
    policy = REMAT_POLICIES[check_remat(remat)]

    def checkpointed(fn: Callable[[nnx.State, Array], Array], in_scan: bool = False) -> Callable[[nnx.State, Array], Array]:
        # A scan already keeps XLA from merging the recomputation with the forward pass.
        return fn if remat == "none" else jax.checkpoint(fn, policy=policy, prevent_cse=not in_scan)

    # With remat the layers always run as a scan: in a Python loop XLA may schedule each layer's
    # recomputation right after the forward pass, which saves nothing (measured on CPU: a 4-layer
    # RoBERTa kept the same temporaries with and without remat; as a scan, "full" cut them ~3x).
    min_layers = 2 if remat != "none" else min_layers
    if len(splits) < max(min_layers, 2) or any(g != graphdef for g, _ in splits[1:]):
        for layer, (layer_graph, state) in zip(layers, splits):
            if remat == "none":
                x = call(layer, x)
            else:
                x = checkpointed(lambda s, h, g=layer_graph: call(nnx.merge(g, s), h))(state, x)
        return x
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(state for _, state in splits))
    layer_fn = checkpointed(lambda state, h: call(nnx.merge(graphdef, state), h), in_scan=True)
    x, _ = jax.lax.scan(lambda h, state: (layer_fn(state, h), None), x, stacked)
    return x


def annotated(init: Callable, names: Sequence[str | None]) -> Callable:
    """Wraps an initializer so the parameter it creates carries logical axis ``names``."""
    return nnx.with_partitioning(init, tuple(names), eager_sharding=False)


def dense(
    in_features: int | Sequence[int],
    out_features: int | Sequence[int],
    in_names: Sequence[str | None],
    out_names: Sequence[str | None],
    *,
    init_std: float,
    dtype: DType,
    param_dtype: DType,
    rngs: nnx.Rngs,
    use_bias: bool = True,
) -> nnx.LinearGeneral:
    """A dense layer (optionally over several input/output axes) with annotated parameters."""
    in_shape = (in_features,) if isinstance(in_features, int) else tuple(in_features)
    return nnx.LinearGeneral(
        in_shape,
        out_features,
        axis=tuple(range(-len(in_shape), 0)),
        use_bias=use_bias,
        dtype=dtype,
        param_dtype=param_dtype,
        kernel_init=annotated(nnx.initializers.normal(init_std), (*in_names, *out_names)),
        bias_init=annotated(nnx.initializers.zeros_init(), tuple(out_names)),
        rngs=rngs,
    )


def embedding(
    num: int,
    features: int,
    names: Sequence[str | None],
    *,
    init_std: float,
    dtype: DType,
    param_dtype: DType,
    rngs: nnx.Rngs,
) -> nnx.Embed:
    """An embedding table with annotated parameters."""
    return nnx.Embed(
        num,
        features,
        dtype=dtype,
        param_dtype=param_dtype,
        embedding_init=annotated(nnx.initializers.normal(init_std), names),
        rngs=rngs,
    )


def layer_norm(
    features: int, *, epsilon: float, dtype: DType, param_dtype: DType, rngs: nnx.Rngs
) -> nnx.LayerNorm:
    """LayerNorm over the last axis, statistics in float32, annotated scale and bias."""
    return nnx.LayerNorm(
        features,
        epsilon=epsilon,
        dtype=dtype,
        param_dtype=param_dtype,
        scale_init=annotated(nnx.initializers.ones_init(), ("embed",)),
        bias_init=annotated(nnx.initializers.zeros_init(), ("embed",)),
        use_fast_variance=False,
        rngs=rngs,
    )


def rms_norm(features: int, *, epsilon: float, dtype: DType, param_dtype: DType, rngs: nnx.Rngs) -> nnx.RMSNorm:
    """RMSNorm over the last axis (statistics in float32), annotated scale."""
    return nnx.RMSNorm(
        features,
        epsilon=epsilon,
        dtype=dtype,
        param_dtype=param_dtype,
        scale_init=annotated(nnx.initializers.ones_init(), ("embed",)),
        use_fast_variance=False,
        rngs=rngs,
    )
