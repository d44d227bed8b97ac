"""Forward-pass speed of our GPT-2 and RoBERTa, beside Hugging Face's PyTorch models.

Measures, at full model size with random weights (nothing is downloaded):
  * GPT-2 prefill: a left-padded batch through the model, writing the KV cache;
  * GPT-2 decode: one jitted single-token step on the cache (the sampler's inner step);
  * RoBERTa: encoder + pooler over a right-padded batch.
Each is jitted once (compile time reported) and then timed over repeats (median).
With torch installed, the same work in Hugging Face's PyTorch models is timed for reference.

    python benchmarks/models_forward.py --batch 8 --length 128 --dtype bfloat16
Results print as a table and are written to benchmarks/results/models_forward_<backend>.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax import models
from common import RESULTS, print_table, time_call, write_result


def _batch(batch: int, length: int, vocab: int, left: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab, (batch, length)).astype(np.int32)
    mask = np.ones((batch, length), np.int32)
    for i in range(batch):  # rows from full length down to half
        pad = (i * length) // (2 * batch)
        if left:
            mask[i, :pad] = 0
        else:
            mask[i, length - pad :] = 0
    return ids, mask


def bench_jax(args) -> list[dict]:
    dtype = jnp.dtype(args.dtype)
    rows = []
    gpt2 = models.GPT2LMHeadModel(models.GPT2Config(), dtype=dtype, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(gpt2)
    slots = args.length + args.new_tokens
    ids, mask = _batch(args.batch, args.length, gpt2.config.vocab_size, left=True)
    cache_mask = np.zeros((args.batch, slots), np.int32)
    cache_mask[:, : args.length] = mask

    @jax.jit
    def prefill(params, ids, mask):
        cache = models.init_cache(gpt2.config, ids.shape[0], slots, dtype)
        return nnx.merge(graphdef, params)(ids, mask, cache=cache, cache_index=0)

    @jax.jit
    def decode(params, token, mask, cache, index):
        return nnx.merge(graphdef, params)(token, mask, cache=cache, cache_index=index)

    out = prefill(params, ids, cache_mask)
    first, median = time_call(lambda: jax.block_until_ready(prefill(params, ids, cache_mask)), args.repeats)
    rows.append(dict(model="gpt2-124M", step="prefill", impl="archer_jax", seconds=median, compile_s=first - median,
                     tokens_per_s=args.batch * args.length / median))
    token = jnp.asarray(ids[:, -1:])
    step_mask = cache_mask.copy()
    step_mask[:, args.length] = 1
    first, median = time_call(
        lambda: jax.block_until_ready(decode(params, token, step_mask, out.cache, jnp.int32(args.length))), args.repeats
    )
    rows.append(dict(model="gpt2-124M", step="decode 1 token", impl="archer_jax", seconds=median,
                     compile_s=first - median, tokens_per_s=args.batch / median))

    roberta = models.RobertaModel(models.RobertaConfig(), dtype=dtype, rngs=nnx.Rngs(0))
    rgraph, rparams = nnx.split(roberta)
    rids, rmask = _batch(args.batch, args.length, roberta.config.vocab_size, left=False)

    @jax.jit
    def encode(params, ids, mask):
        return nnx.merge(rgraph, params)(ids, mask).pooler_output

    first, median = time_call(lambda: jax.block_until_ready(encode(rparams, rids, rmask)), args.repeats)
    rows.append(dict(model="roberta-base", step="encode", impl="archer_jax", seconds=median, compile_s=first - median,
                     tokens_per_s=args.batch * args.length / median))
    return rows


def bench_torch(args) -> list[dict]:
    try:
        import torch
        import transformers
    except ImportError:
        return []
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    rows = []
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config()).to(dtype).eval()
    ids, mask = _batch(args.batch, args.length, gpt2.config.vocab_size, left=True)
    ids_t, mask_t = torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)
    pos = torch.clamp(mask_t.cumsum(-1) - 1, min=0)
    with torch.no_grad():
        out = gpt2(input_ids=ids_t, attention_mask=mask_t, position_ids=pos, use_cache=True)
        _, median = time_call(lambda: gpt2(input_ids=ids_t, attention_mask=mask_t, position_ids=pos, use_cache=True),
                          args.repeats)
        rows.append(dict(model="gpt2-124M", step="prefill", impl="hf-torch", seconds=median,
                         tokens_per_s=args.batch * args.length / median))
        step_mask = torch.cat([mask_t, torch.ones((args.batch, 1), dtype=torch.long)], 1)
        step_pos = pos[:, -1:] + 1
        past = out.past_key_values

        def decode():
            gpt2(input_ids=ids_t[:, -1:], attention_mask=step_mask, position_ids=step_pos,
                 past_key_values=past, use_cache=True)
            past.crop(-1)  # HF's DynamicCache grows in place: drop the new token for the next call

        _, median = time_call(decode, args.repeats)
        rows.append(dict(model="gpt2-124M", step="decode 1 token", impl="hf-torch", seconds=median,
                         tokens_per_s=args.batch / median))
        roberta = transformers.RobertaModel(transformers.RobertaConfig()).to(dtype).eval()
        rids, rmask = _batch(args.batch, args.length, roberta.config.vocab_size, left=False)
        rids_t, rmask_t = torch.tensor(rids, dtype=torch.long), torch.tensor(rmask, dtype=torch.long)
        _, median = time_call(lambda: roberta(input_ids=rids_t, attention_mask=rmask_t), args.repeats)
        rows.append(dict(model="roberta-base", step="encode", impl="hf-torch", seconds=median,
                         tokens_per_s=args.batch * args.length / median))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32, help="cache slots beyond the prompt")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-torch", action="store_true", help="skip the Hugging Face PyTorch reference")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    rows = bench_jax(args) + ([] if args.no_torch else bench_torch(args))
    print(f"backend={jax.default_backend()} batch={args.batch} length={args.length} dtype={args.dtype}")
    for r in rows:
        r["ms"] = 1e3 * r["seconds"]
    print_table(
        rows,
        [("model", "model", ""), ("step", "step", ""), ("impl", "impl", ""), ("ms", "ms", ".1f"),
         ("compile_s", "compile s", ".1f"), ("tokens_per_s", "tokens/s", ".0f")],
    )
    config = dict(batch=args.batch, length=args.length, new_tokens=args.new_tokens, dtype=args.dtype)
    path = write_result(f"models_forward_{jax.default_backend()}_{args.dtype}", config, rows, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
