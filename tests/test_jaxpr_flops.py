"""Matmul FLOPs counted on jaxprs, against counts worked out by hand."""

import jax
import jax.numpy as jnp

from archer_jax.jaxpr_flops import matmul_flops


def test_a_matmul():
    assert matmul_flops(lambda a, b: a @ b, jnp.ones((4, 8)), jnp.ones((8, 16))) == 2 * 4 * 8 * 16


def test_scans_count_their_body_once_per_step_and_gradients_add_their_matmuls():
    def layers(x, w):  # 3 layers of [4, 8] @ [8, 8]
        return jax.lax.scan(lambda c, wi: (jnp.tanh(c @ wi), None), x, w)[0].sum()

    x, w = jnp.ones((4, 8)), jnp.ones((3, 8, 8))
    forward = 3 * 2 * 4 * 8 * 8
    assert matmul_flops(layers, x, w) == forward
    assert matmul_flops(jax.grad(layers, argnums=1), x, w) == 3 * forward  # forward, and two matmuls back


def test_batched_contractions_and_abstract_arguments():
    scores = lambda q, k: jnp.einsum("bhqd,bhkd->bhqk", q, k)  # noqa: E731
    q = jax.ShapeDtypeStruct((2, 4, 16, 8), jnp.bfloat16)
    assert matmul_flops(scores, q, q) == 2 * (2 * 4 * 16 * 16) * 8
