"""Matmul FLOPs counted on jaxprs, against counts worked out by hand."""

import jax
import jax.numpy as jnp

from archer_jax.plan.flops import matmul_flops


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


def test_a_scanned_gpt2_forward_counts_every_layer():
    # 6 layers (scanned: more than SCAN_MIN_LAYERS), counted by hand: per layer the q/k/v and
    # output projections (4 d^2 per token), the MLP (2 d x 4d), scores and mixing (2 T d each);
    # then the LM head (d x vocabulary).
    from flax import nnx

    from archer_jax.models import GPT2LMHeadModel
    from archer_jax.models.gpt2.model import GPT2Config
    from archer_jax.models.layers import SCAN_MIN_LAYERS

    layers, d, vocab, batch, length = 6, 32, 100, 2, 16
    assert layers > SCAN_MIN_LAYERS
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=64, n_embd=d, n_layer=layers, n_head=4),
                            rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    ids = jnp.ones((batch, length), jnp.int32)
    forward = lambda s, i: nnx.merge(graphdef, s)(i, jnp.ones_like(i)).logits  # noqa: E731
    tokens = batch * length
    per_layer = 2 * tokens * (4 * d * d + 2 * d * 4 * d) + 2 * 2 * batch * length * length * d
    assert matmul_flops(forward, state, ids) == layers * per_layer + 2 * tokens * d * vocab


def test_the_tpu_flash_kernel_counts_its_matmuls():
    """The Pallas kernel's FLOPs are its own estimate, not one block's: at least the two attention
    matmuls (2 x 2 x b x h x q x k x d) the XLA path counts, forward; its backward kernels, which
    recompute the scores, add their bodies once per grid step."""
    from archer_jax.models import attention

    b, h, n, d = 2, 2, 256, 16
    x = jax.ShapeDtypeStruct((b, h, n, d), jnp.float32)
    seg = jnp.ones((b, n), jnp.int32)
    mask = attention.SegmentMask(jnp.ones((b, 1, n, n), bool), seg, seg)
    forward = lambda q, k, v: attention.dot_product_attention(q, k, v, mask, 1.0)  # noqa: E731
    backward = jax.grad(lambda q, k, v: forward(q, k, v).sum(), argnums=(0, 1, 2))
    xla = matmul_flops(forward, x, x, x)
    assert xla == 4 * b * h * n * n * d
    with attention.building_for("tpu"):
        # (fresh lambdas: JAX's trace caches know nothing of building_for)
        assert "pallas_call" in str(jax.make_jaxpr(lambda *a: forward(*a))(x, x, x))
        kernel = matmul_flops(lambda *a: forward(*a), x, x, x)
        kernel_backward = matmul_flops(lambda *a: backward(*a), x, x, x)
    assert xla <= kernel <= 1.1 * xla
    assert kernel_backward >= 3 * xla  # the forward, and at least four more matmuls of its size
