"""Logical axis names on parameters, and the shared attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import models
from archer_jax.models import attention
from archer_jax.models.attention import block_rows, dot_product_attention
from archer_jax.models.layers import activation, scan_layers


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


@pytest.mark.parametrize("block_bytes", [None, 1, 200])  # one block; a block per row; two rows per block
def test_dot_product_attention_against_numpy(block_bytes):
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(4, 2, 3, 4)).astype(np.float32) for _ in range(3))  # [batch, heads, len, dim]
    mask = rng.random((4, 1, 3, 3)) > 0.3
    mask[..., 0] = True
    out = dot_product_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask), 0.5, block_bytes=block_bytes)
    expected = np.zeros_like(q)
    for b, h, i in np.ndindex(4, 2, 3):  # one query row at a time
        scores = np.where(mask[b, 0, i], k[b, h] @ q[b, h, i] * 0.5, -np.inf)
        weights = np.exp(scores - scores.max())
        expected[b, h, i] = (weights / weights.sum()) @ v[b, h]
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-5)


@pytest.mark.parametrize("block_bytes", [None, 1])
def test_fully_masked_query_row_is_finite(block_bytes):
    x = jnp.ones((2, 1, 2, 4))
    out = dot_product_attention(x, x, x, jnp.zeros((2, 1, 2, 2), bool), 1.0, block_bytes=block_bytes)
    assert bool(jnp.isfinite(out).all())


def test_block_rows_divides_the_batch_and_fits_the_budget():
    per_row = 4 * 2 * 8 * 8  # float32 scores of one row: 2 heads, 8 x 8
    assert block_rows(6, 2, 8, 8, None) is None
    assert block_rows(6, 2, 8, 8, 6 * per_row) is None  # the whole batch fits: one block
    assert block_rows(6, 2, 8, 8, 4 * per_row) == 3  # 4 rows fit, 3 divides 6
    assert block_rows(6, 2, 8, 8, 1) == 1
    assert block_rows(7, 2, 8, 8, 3 * per_row) == 1  # 7 is prime


def _attention_problem(dtype=np.float32, causal=False, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(4, 3, 6, 8)), dtype) for _ in range(3))
    lengths = np.array([6, 2, 4, 1])
    mask = (np.arange(6)[None, :] < lengths[:, None])[:, None, None, :]  # right padding: [4, 1, 1, 6]
    if causal:
        mask = mask & np.tril(np.ones((6, 6), bool))[None, None]
    mask = mask.copy()
    mask[3, ..., :] = False  # a row with no key at all
    return q, k, v, jnp.asarray(mask)


@pytest.mark.parametrize("causal", [False, True])
def test_blocked_attention_gradients_match_autodiff(causal):
    """The blocked path's hand-written backward against JAX's autodiff of the one-block path."""
    q, k, v, mask = _attention_problem(causal=causal)
    weights = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)

    def loss(block_bytes):
        return lambda q, k, v: jnp.sum(jnp.sin(dot_product_attention(q, k, v, mask, 0.3, block_bytes=block_bytes)) * weights)

    expected = jax.grad(loss(None), argnums=(0, 1, 2))(q, k, v)
    for block_bytes in (1, 2 * 4 * 3 * 36):  # one row per block; two rows per block
        got = jax.jit(jax.grad(loss(block_bytes), argnums=(0, 1, 2)))(q, k, v)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), atol=2e-5)


def test_blocked_attention_bfloat16_follows_float32():
    q, k, v, mask = _attention_problem(dtype=jnp.bfloat16)
    f32 = dot_product_attention(*(x.astype(jnp.float32) for x in (q, k, v)), mask, 0.3, block_bytes=None)
    out = dot_product_attention(q, k, v, mask, 0.3, block_bytes=1)
    grads = jax.grad(lambda q: jnp.sum(dot_product_attention(q, k, v, mask, 0.3, block_bytes=1).astype(jnp.float32)))(q)
    assert out.dtype == grads.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(f32), atol=3e-2)


def test_blocked_attention_on_a_batch_sharded_mesh():
    """Blocks split a batch that is sharded over devices: same numbers as one device."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = np.array(jax.devices()[:4])
    if devices.size < 4:
        pytest.skip("needs 4 devices (tests/conftest.py asks XLA for 8 CPU devices)")
    q, k, v, mask = _attention_problem()
    expected = dot_product_attention(q, k, v, mask, 0.3, block_bytes=None)
    sharding = NamedSharding(Mesh(devices, ("data",)), PartitionSpec("data"))
    q, k, v, mask = jax.device_put((q, k, v, mask), sharding)
    got = jax.jit(lambda q, k, v, m: dot_product_attention(q, k, v, m, 0.3, block_bytes=1))(q, k, v, mask)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-6)


def test_attention_blocks_by_default_on_cpu_only(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert attention.default_block_bytes() is None
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert attention.default_block_bytes() == attention.CPU_BLOCK_BYTES


def test_unknown_activation_names_itself():
    assert activation("gelu_new")(jnp.float32(1.0)) == pytest.approx(float(jax.nn.gelu(1.0, approximate=True)))
    with pytest.raises(ValueError, match="'swiglu'"):
        activation("swiglu")


class _Affine(nnx.Module):
    def __init__(self, features: int, rngs: nnx.Rngs, shift: float = 0.0):
        self.linear = nnx.Linear(features, features, rngs=rngs)
        self.shift = shift  # a static attribute: layers that differ in it have different graphs

    def __call__(self, x):
        return jnp.tanh(self.linear(x)) + self.shift


@pytest.mark.parametrize("count", [1, 2, 5])
def test_scan_layers_equals_the_loop_in_values_and_gradients(count):
    stack = nnx.List([_Affine(3, nnx.Rngs(i)) for i in range(count)])
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3)), jnp.float32)
    graphdef, params = nnx.split(stack)

    def run(params, min_layers):
        layers = nnx.merge(graphdef, params)
        return jnp.sum(scan_layers(layers, x, lambda layer, h: layer(h), min_layers=min_layers) ** 2)

    looped = jax.value_and_grad(run)(params, count + 1)
    scanned = jax.value_and_grad(run)(params, 2)
    assert ("scan" in str(jax.make_jaxpr(run, static_argnums=1)(params, 2))) == (count >= 2)
    assert "scan" not in str(jax.make_jaxpr(run, static_argnums=1)(params, count + 1))
    # NumPy: the layers applied in order
    h = np.asarray(x)
    for layer in stack:
        h = np.tanh(h @ np.asarray(layer.linear.kernel[...]) + np.asarray(layer.linear.bias[...]))
    np.testing.assert_allclose(float(scanned[0]), float(np.sum(h**2)), rtol=1e-5)
    np.testing.assert_allclose(float(looped[0]), float(scanned[0]), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(looped[1]), jax.tree.leaves(scanned[1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_scan_layers_loops_over_layers_with_different_graphs():
    stack = [_Affine(3, nnx.Rngs(0)), _Affine(3, nnx.Rngs(1), shift=1.0), _Affine(3, nnx.Rngs(2))]
    x = jnp.ones((2, 3))
    jaxpr = str(jax.make_jaxpr(lambda x: scan_layers(stack, x, lambda layer, h: layer(h), min_layers=2))(x))
    assert "scan" not in jaxpr
    expected = stack[2](stack[1](stack[0](x)))
    got = scan_layers(stack, x, lambda layer, h: layer(h), min_layers=2)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6)


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
@pytest.mark.parametrize("kind", ["gpt2", "roberta"])
def test_remat_keeps_values_and_gradients_and_saves_memory(kind, tmp_path):
    """``remat`` (config.model.remat) recomputes activations in the backward pass: the same loss and
    gradients, and XLA's buffer assignment keeps fewer temporaries (dots < none, full < dots)."""
    directory = models.build_tiny(kind, tmp_path / kind)
    load = models.load_gpt2 if kind == "gpt2" else models.load_roberta
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(3, 200, (16, 64)), jnp.int32)
    mask = jnp.asarray(np.arange(64)[None] < rng.integers(20, 65, (16, 1)), jnp.int32)
    results, temp = {}, {}
    for remat in ("none", "dots", "full"):
        model = load(directory, remat=remat)
        graphdef, params = nnx.split(model)

        def loss(params):
            out = nnx.merge(graphdef, params)(ids, mask)
            hidden = out.hidden_state if kind == "gpt2" else out.last_hidden_state
            return jnp.sum(jnp.tanh(hidden) * mask[..., None])

        step = jax.jit(jax.value_and_grad(loss))
        results[remat] = step(params)
        temp[remat] = step.lower(params).compile().memory_analysis().temp_size_in_bytes
        assert ("remat" in str(jax.make_jaxpr(loss)(params))) == (remat != "none")
    for remat in ("dots", "full"):
        # rtol 1e-5: a sum of 16 x 64 x hidden terms, looped or scanned (2.6e-6 apart at LLVM level 0).
        np.testing.assert_allclose(float(results[remat][0]), float(results["none"][0]), rtol=1e-5)
        # Relative to the gradients' scale: RoBERTa without remat loops over its layers, with remat it
        # scans them, so gradients that are zero up to rounding (the key biases') round differently.
        ours, reference = jax.tree.leaves(results[remat][1]), jax.tree.leaves(results["none"][1])
        scale = max(np.abs(np.asarray(b)).max() for b in reference)
        assert max(np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(ours, reference)) <= 1e-5 * scale
    assert temp["full"] < temp["dots"] < temp["none"], temp
    with pytest.raises(ValueError, match="remat must be one of none, dots, full, got 'all'"):
        load(directory, remat="all")
