"""Logical axis names on parameters, and the shared attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import models
from archer_jax.models.attention import dot_product_attention
from archer_jax.models.layers import activation


def _specs(model):
    return {path: tuple(v.get_value()) for path, v in nnx.to_flat_state(nnx.get_partition_spec(nnx.state(model, nnx.Param)))}


def test_gpt2_parameters_carry_logical_axis_names():
    config = models.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    specs = _specs(models.GPT2LMHeadModel(config, rngs=nnx.Rngs(0)))
    assert specs[("wte", "embedding")] == ("vocab", "embed")
    assert specs[("h", 0, "attn", "query", "kernel")] == ("embed", "heads", "kv")
    assert specs[("h", 0, "attn", "out", "kernel")] == ("heads", "kv", "embed")
    assert specs[("h", 0, "mlp", "fc", "kernel")] == ("embed", "mlp")
    assert specs[("h", 0, "mlp", "fc", "bias")] == ("mlp",)
    assert all(len(spec) > 0 for spec in specs.values())  # every parameter is annotated


def test_roberta_parameters_carry_logical_axis_names():
    config = models.RobertaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=20)
    specs = _specs(models.RobertaModel(config, rngs=nnx.Rngs(0)))
    assert specs[("embeddings", "word", "embedding")] == ("vocab", "embed")
    assert specs[("layers", 0, "intermediate", "kernel")] == ("embed", "mlp")
    assert all(len(spec) > 0 for spec in specs.values())


def test_dot_product_attention_against_numpy():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 2, 3, 4)).astype(np.float32) for _ in range(3))  # [batch, heads, len, dim]
    mask = rng.random((2, 1, 3, 3)) > 0.3
    mask[..., 0] = True
    out = dot_product_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask), 0.5)
    expected = np.zeros_like(q)
    for b, h, i in np.ndindex(2, 2, 3):  # one query row at a time
        scores = np.where(mask[b, 0, i], k[b, h] @ q[b, h, i] * 0.5, -np.inf)
        weights = np.exp(scores - scores.max())
        expected[b, h, i] = (weights / weights.sum()) @ v[b, h]
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-5)


def test_fully_masked_query_row_is_finite():
    x = jnp.ones((1, 1, 2, 4))
    out = dot_product_attention(x, x, x, jnp.zeros((1, 1, 2, 2), bool), 1.0)
    assert bool(jnp.isfinite(out).all())


def test_unknown_activation_names_itself():
    assert activation("gelu_new")(jnp.float32(1.0)) == pytest.approx(float(jax.nn.gelu(1.0, approximate=True)))
    with pytest.raises(ValueError, match="'swiglu'"):
        activation("swiglu")
