"""Meshes and logical-axis rules (8 CPU devices from conftest's XLA_FLAGS)."""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from archer_jax import models
from archer_jax.models import tiny
from archer_jax.runtime import sharding

needs_8 = pytest.mark.skipif(
    jax.device_count() < 8, reason="needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8"
)


@needs_8
def test_make_mesh_shapes_and_errors():
    assert dict(sharding.make_mesh(2, 2, 2).shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert dict(sharding.make_mesh(fsdp=4, tensor=1).shape) == {"data": 2, "fsdp": 4, "tensor": 1}
    assert dict(sharding.single_device_mesh().shape) == {"data": 1, "fsdp": 1, "tensor": 1}
    with pytest.raises(ValueError, match="needs 12 devices, have 8"):
        sharding.make_mesh(3, 2, 2)
    with pytest.raises(ValueError, match="only one mesh axis may be -1"):
        sharding.make_mesh(-1, -1)
    with pytest.raises(ValueError, match="do not divide"):
        sharding.make_mesh(-1, 3)


@needs_8
def test_logical_to_mesh_drops_what_cannot_be_split():
    mesh = sharding.make_mesh(2, 2, 2)
    assert sharding.logical_to_mesh(("vocab", "embed"), (1024, 64), mesh) == P("tensor", "fsdp")
    # GPT-2's 50257-token vocabulary does not split in two: that dimension is replicated.
    assert sharding.logical_to_mesh(("vocab", "embed"), (50257, 64), mesh) == P(None, "fsdp")
    assert sharding.logical_to_mesh(("batch", None), (8, 3), mesh) == P(("data", "fsdp"), None)
    assert sharding.logical_to_mesh(("batch", None), (2, 3), mesh) == P("data", None)
    # A mesh axis is used once per array, by the first dimension that claims it.
    assert sharding.logical_to_mesh(("heads", "mlp"), (4, 8), mesh) == P("tensor", None)
    with pytest.raises(KeyError, match="logical axis 'nope' has no sharding rule"):
        sharding.logical_to_mesh(("nope",), (4,), mesh)


@needs_8
def test_model_parameters_are_sharded_by_their_logical_axes(tmp_path):
    mesh = sharding.make_mesh(2, 2, 2)
    model = models.GPT2LMHeadModel(tiny.tiny_config("gpt2", 1024), rngs=nnx.Rngs(0))
    state = nnx.state(model)
    shardings = sharding.state_shardings(state, mesh)
    placed = jax.device_put(state, shardings)
    wte = placed["wte"]["embedding"]
    assert wte.sharding.spec == P("tensor", "fsdp")
    assert wte.addressable_shards[0].data.shape == (1024 // 2, 64 // 2)
    fc = placed["h"][0]["mlp"]["fc"]["kernel"]
    assert fc.sharding.spec == P("fsdp", "tensor")
    np.testing.assert_array_equal(np.asarray(wte), np.asarray(state["wte"]["embedding"][...]))
    # The sharded model computes what the unsharded one does.
    ids = np.arange(32, dtype=np.int32).reshape(4, 8)
    graphdef = nnx.graphdef(model)
    forward = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x).logits)
    np.testing.assert_allclose(
        np.asarray(forward(placed, jax.device_put(ids, sharding.batch_sharding(mesh)))),
        np.asarray(model(ids).logits),
        atol=1e-5,
    )


def test_batch_size_multiple():
    assert sharding.batch_size_multiple(None) == 1
    if jax.device_count() >= 8:
        assert sharding.batch_size_multiple(sharding.make_mesh(2, 2, 2)) == 4


def test_mesh_shape_errors_are_one_line_without_devices():
    assert sharding.mesh_shape(-1, 2, 1, num_devices=8) == {"data": 4, "fsdp": 2, "tensor": 1}
    assert sharding.mesh_shape(2, 2, 2, num_devices=8) == {"data": 2, "fsdp": 2, "tensor": 2}
    cases = [
        ((3, 1, 1, 1), "mesh data=3 x fsdp=1 x tensor=1 needs 3 devices, have 1 (make the axes multiply to 1, or set one of them to -1)"),
        ((-1, 3, 1, 8), "8 devices do not divide into mesh axes data=-1 x fsdp=3 x tensor=1 (the other axes take 3 devices per data slot)"),
        ((-1, -1, 1, 8), "only one mesh axis may be -1, got ['data', 'fsdp']"),
        ((0, 1, 1, 8), "mesh axis 'data' must be >= 1 or -1, got 0"),
    ]
    for (data, fsdp, tensor, devices), message in cases:
        with pytest.raises(ValueError) as info:
            sharding.mesh_shape(data, fsdp, tensor, num_devices=devices)
        assert str(info.value) == message
