"""Generation speed of archer_jax's sampler beside Hugging Face PyTorch ``generate``.

GPT-2-124M-shaped random weights (nothing is downloaded); full-length prompts of random ids;
every row samples exactly ``--new-tokens`` tokens at temperature 1 with no top-k/top-p (stop
strings and EOS off on both sides, so both do the same work). For each batch size:

  * ``total``: prompt in, all new tokens out (ours: jitted prefill + while-loop decode;
    HF: ``generate(do_sample=True, min_new_tokens=max_new_tokens)``);
  * ``prefill``: the same with one new token;
  * ``decode/step``: (total - prefill) / (new tokens - 1);
  * ``gen tokens/s``: batch * new tokens / total.

On a GPU or TPU the decode step is also set against the memory-bandwidth roofline: each step
must read every parameter and the KV cache once, so the floor is
``(parameter bytes + cache bytes) / peak bandwidth``.

    python benchmarks/sampler.py --batch-sizes 32 128 --prompt 256 --new-tokens 32
Prints a table; writes benchmarks/results/sampler_<backend>_<dtype>.json.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax import models
from archer_jax.models import tiny
from archer_jax.sampling import Sampler, SamplingParams
from archer_jax.sampling.decoding import decode_chunk
from common import RESULTS, decode_floor_s, machine, peak_bandwidth, print_table, time_call, write_result


def _prompts(batch: int, length: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.random.default_rng(0).integers(0, vocab, (batch, length)).astype(np.int32)
    return ids, np.ones_like(ids)


def bench_ours(args, tokenizer) -> list[dict]:
    dtype = jnp.dtype(args.dtype)
    model = models.GPT2LMHeadModel(models.GPT2Config(), dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))
    sampler = Sampler(model, tokenizer, min_prompt_bucket=args.prompt)
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(sampler.model_state))
    config = model.config
    bandwidth = peak_bandwidth(jax.devices()[0], args.peak_bandwidth)
    rows = []
    for batch, chunk in itertools.product(args.batch_sizes, args.decode_chunks):
        ids, mask = _prompts(batch, args.prompt, config.vocab_size)
        times = {}
        for new in (1, args.new_tokens):
            params = SamplingParams(max_new_tokens=new, temperature=args.temperature, top_p=args.top_p,
                                    decode_chunk=chunk, stop_strings=(), stop_at_eos=False)

            def run():
                jax.block_until_ready(sampler.generate_tokens(ids, mask, jax.random.key(0), params))

            first, times[new] = time_call(run, args.repeats)
            if new == args.new_tokens:
                compile_s = first - times[new]
        total, prefill = times[args.new_tokens], times[1]
        step = (total - prefill) / (args.new_tokens - 1)
        row = dict(impl="archer_jax", batch=batch, decode_chunk=decode_chunk(params, jax.default_backend()),
                   total_s=total, prefill_s=prefill, decode_step_ms=1e3 * step,
                   gen_tokens_per_s=batch * args.new_tokens / total, compile_s=compile_s)
        if bandwidth:  # the decode loop attends over every slot
            floor = decode_floor_s(param_bytes, config, batch, args.prompt + args.new_tokens, dtype.itemsize, bandwidth)
            row.update(roofline_step_ms=1e3 * floor, roofline_fraction=floor / step)
        rows.append(row)
    return rows


def bench_torch(args) -> list[dict]:
    try:
        import torch
        import transformers
    except ImportError:
        return []
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).to(device=device, dtype=dtype).eval()
    rows = []
    for batch in args.batch_sizes:
        ids, mask = _prompts(batch, args.prompt, model.config.vocab_size)
        ids_t = torch.tensor(ids, dtype=torch.long, device=device)
        mask_t = torch.tensor(mask, dtype=torch.long, device=device)
        times = {}
        for new in (1, args.new_tokens):

            def run():
                with torch.no_grad():
                    model.generate(input_ids=ids_t, attention_mask=mask_t, do_sample=True, top_k=0, top_p=1.0,
                                   temperature=1.0, max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
                if device == "cuda":
                    torch.cuda.synchronize()

            _, times[new] = time_call(run, args.repeats)
        total, prefill = times[args.new_tokens], times[1]
        rows.append(dict(impl="hf-torch", batch=batch, total_s=total, prefill_s=prefill,
                         decode_step_ms=1e3 * (total - prefill) / (args.new_tokens - 1),
                         gen_tokens_per_s=batch * args.new_tokens / total))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens per row")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--decode-chunks", type=int, nargs="+", default=[0],
                        help="decode steps between checks for finished rows (0: the platform's default)")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls after the first (median)")
    parser.add_argument("--peak-bandwidth", type=float, default=None, help="bytes/s, for an unlisted device")
    parser.add_argument("--no-torch", action="store_true", help="skip the Hugging Face PyTorch reference")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--suffix", default="", help="appended to the result file's name")
    args = parser.parse_args()
    if args.new_tokens < 2:
        parser.error("--new-tokens must be >= 2 (decode time is total minus the one-token run)")

    with tempfile.TemporaryDirectory() as tmp:  # any tokenizer will do: prompts are token ids
        tokenizer = models.load_tokenizer(tiny.build_tiny("gpt2", Path(tmp) / "tok"))
        rows = bench_ours(args, tokenizer)
    if not args.no_torch:
        rows += bench_torch(args)
    rows.sort(key=lambda r: (r["batch"], r["impl"]))
    hf = {r["batch"]: r for r in rows if r["impl"] == "hf-torch"}
    for r in rows:
        if r["impl"] == "archer_jax" and r["batch"] in hf:
            r["speedup_vs_hf"] = r["gen_tokens_per_s"] / hf[r["batch"]]["gen_tokens_per_s"]
    info = machine()
    print(f"{info['device_kind'] or info['backend']} ×{info['device_count']}, {info['cpu_count']} CPUs, {info['date']}: "
          f"GPT-2-124M shapes, prompt {args.prompt}, {args.new_tokens} new tokens, {args.dtype}, "
          f"temperature {args.temperature}, top_p {args.top_p}")
    print_table(
        rows,
        [("impl", "impl", ""), ("batch", "batch", "d"), ("decode_chunk", "chunk", "d"), ("total_s", "total s", ".2f"), ("prefill_s", "prefill s", ".2f"),
         ("decode_step_ms", "decode/step ms", ".1f"), ("gen_tokens_per_s", "gen tokens/s", ".0f"),
         ("speedup_vs_hf", "ours/HF", ".2f"), ("compile_s", "compile s", ".1f"),
         ("roofline_fraction", "roofline", ".2f")],
    )
    config = dict(batch_sizes=args.batch_sizes, prompt=args.prompt, new_tokens=args.new_tokens, dtype=args.dtype,
                  repeats=args.repeats, temperature=args.temperature, top_p=args.top_p, decode_chunks=args.decode_chunks)
    path = write_result(f"sampler_{jax.default_backend()}_{args.dtype}{args.suffix}", config, rows, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
