"""Our attention, one block vs blocks of batch rows, against PyTorch's scaled_dot_product_attention.

Times the forward and forward+backward (gradients for q, k, v) of
:func:`archer_jax.models.attention.dot_product_attention` at the attention shapes of the
iteration benchmark, for several ``block_bytes`` (None = the whole batch as one block; the
library's CPU default is ``CPU_BLOCK_BYTES``), and the same with ``torch.nn.functional.
scaled_dot_product_attention`` (PyTorch's fused CPU kernel) for comparison.

    python attention.py
Prints the table; writes results/attention_<backend>.json.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from archer_jax.models import attention
from common import print_table, time_call, write_result

# (name, batch, heads, length, head_dim, causal): the tiny preset's critic (RoBERTa, 256-token
# observations) and its policy prefill/actor (GPT-2, 256 + 32 slots); RoBERTa-base on 8 x 128
# and GPT-2-124M on 8 x 160 (observation + action) as in the base workload's micro-batches.
SHAPES = (
    ("tiny critic", 32, 4, 256, 16, False),
    ("tiny policy", 32, 4, 288, 16, True),
    ("base critic", 8, 12, 128, 64, False),
    ("base policy", 8, 12, 160, 64, True),
)


def _problem(batch: int, heads: int, length: int, dim: int, causal: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, heads, length, dim)).astype(np.float32) for _ in range(3))
    lengths = rng.integers(length // 2, length + 1, batch)  # right padding, as in critic batches
    mask = (np.arange(length)[None, :] < lengths[:, None])[:, None, None, :]
    if causal:
        mask = mask & np.tril(np.ones((length, length), bool))[None, None]
    return q, k, v, mask


def time_ours(q, k, v, mask, block_bytes, repeats: int) -> tuple[float, float]:
    scale = q.shape[-1] ** -0.5
    q, k, v, mask = (jnp.asarray(x) for x in (q, k, v, mask))

    def attend(q, k, v):
        return attention.dot_product_attention(q, k, v, mask, scale, block_bytes=block_bytes)

    forward = jax.jit(attend)
    backward = jax.jit(jax.grad(lambda q, k, v: jnp.sum(jnp.sin(attend(q, k, v))), argnums=(0, 1, 2)))
    _, fwd = time_call(lambda: jax.block_until_ready(forward(q, k, v)), repeats)
    _, both = time_call(lambda: jax.block_until_ready(backward(q, k, v)), repeats)
    return fwd, both


def time_torch(q, k, v, mask, repeats: int) -> tuple[float, float]:
    import torch

    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    tmask = torch.tensor(mask)

    def attend():
        return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask)

    def both():
        for t in (tq, tk, tv):
            t.grad = None
        torch.sin(attend()).sum().backward()

    with torch.no_grad():
        _, fwd = time_call(attend, repeats)
    _, total = time_call(both, repeats)
    return fwd, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--block-bytes", type=int, nargs="+", default=[1 << 20, attention.CPU_BLOCK_BYTES, 8 << 20])
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()

    rows = []
    for name, *shape in SHAPES:
        q, k, v, mask = _problem(*shape)
        for block_bytes in (None, *args.block_bytes):
            fwd, both = time_ours(q, k, v, mask, block_bytes, args.repeats)
            rows.append(dict(shape=name, dims="x".join(map(str, shape[:4])), impl="archer_jax",
                             block_bytes=block_bytes, forward_ms=1e3 * fwd, forward_backward_ms=1e3 * both))
        if not args.no_torch:
            fwd, both = time_torch(q, k, v, mask, args.repeats)
            rows.append(dict(shape=name, dims="x".join(map(str, shape[:4])), impl="torch sdpa", block_bytes=None,
                             forward_ms=1e3 * fwd, forward_backward_ms=1e3 * both))
        print(f"{name} done", flush=True)
    print_table(rows, [("shape", "shape", ""), ("dims", "b x h x len x d", ""), ("impl", "impl", ""),
                       ("block_bytes", "block bytes", ""), ("forward_ms", "fwd ms", ".2f"),
                       ("forward_backward_ms", "fwd+bwd ms", ".2f")])
    name = f"attention_{jax.default_backend()}" + (f"_{args.tag}" if args.tag else "")
    print(f"wrote {write_result(name, vars(args), rows)}")


if __name__ == "__main__":
    main()
