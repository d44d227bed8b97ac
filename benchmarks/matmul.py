"""This machine's float32 matrix-multiply rate in JAX (XLA) and PyTorch: the ceiling that the
iteration benchmark's TFLOP/s figures are read against.

    python matmul.py            # a few seconds; results/matmul_<backend>.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp

from common import RESULTS, machine, print_table, time_call, write_result

# Transformer-shaped products: tokens x width -> MLP width, back, and a square projection.
SHAPES = ((4096, 768, 3072), (4096, 3072, 768), (4096, 768, 768), (8192, 64, 256))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    for m, k, n in SHAPES:
        flops = 2.0 * m * k * n
        a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
        matmul = jax.jit(jnp.matmul)
        _, jax_s = time_call(lambda: matmul(a, b).block_until_ready(), args.repeats)
        row = dict(shape=f"{m}x{k} @ {k}x{n}", jax_gflops=flops / jax_s / 1e9)
        if not args.no_torch:
            import torch

            ta, tb = torch.ones(m, k), torch.ones(k, n)
            _, torch_s = time_call(lambda: ta @ tb, args.repeats)
            row["torch_gflops"] = flops / torch_s / 1e9
        rows.append(row)
    info = machine()
    print(f"{info['device_kind'] or info['backend']}, {info['cpu_count']} CPUs, {info['date']}; float32, medians")
    columns = [("shape", "shape", ""), ("jax_gflops", "JAX GFLOP/s", ".1f")]
    if not args.no_torch:
        columns.append(("torch_gflops", "PyTorch GFLOP/s", ".1f"))
    print_table(rows, columns)
    print(f"wrote {write_result(f'matmul_{jax.default_backend()}', dict(vars(args), out=str(args.out)), rows, args.out)}")


if __name__ == "__main__":
    main()
