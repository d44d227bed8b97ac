"""A critic phase's ``a_π``: one decode per step (as before) vs the phase's rows in a few decodes.

Both sides sample the same rows with the same keys (row ``i`` of step ``s``: the step's key
and row id ``i``) from one random-weight GPT-2 at the workload's size, through
:class:`archer_jax.sampling.Sampler` (per step: ``generate_rows``, each with its host round
trip and its texts) and :func:`archer_jax.sampling.phase_decodes.generate_steps` (the phase at
once). Prompts are random ids at the lengths of a real replay of the workload's games
(:func:`workload.transition_lengths`), or all at ``observation`` tokens (``--fixed-lengths``).
Each side runs once to compile, then ``--repeats`` interleaved timed rounds (medians). The JSON
keeps the decodes each side ran, the rows they padded, and how many sampled tokens differ
between the two (the same keys draw the same tokens up to logits' rounding in other shapes).

    python benchmarks/pi_phase.py --sizes tiny base
    python benchmarks/pi_phase.py --sizes paper --tag gpu_h100      # on an accelerator
Writes benchmarks/results/pi_phase_<backend>.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from archer_jax import models
from archer_jax.models import tiny
from archer_jax.runtime import sharding
from archer_jax.sampling import Sampler, SamplingParams, phase_decodes
from common import RESULTS, machine, print_table, write_result
from workload import Workload, transition_lengths, workloads


def phase_prompts(w: Workload, steps: int, fixed: bool, seed: int = 0) -> list[list[np.ndarray]]:
    """``steps`` steps of ``w.transitions`` random policy-id prompts each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        lengths = (np.full(w.transitions, w.observation) if fixed else transition_lengths(w, rng)["observation"])
        out.append([rng.integers(0, w.policy.vocab_size, int(n)).astype(np.int32) for n in lengths])
    return out


def bench(w: Workload, steps: int, args, tokenizer) -> dict:
    policy = models.GPT2LMHeadModel(w.policy, rngs=nnx.Rngs(0))
    sampler = Sampler(policy, tokenizer, mesh=sharding.make_mesh())
    sampling = SamplingParams(max_new_tokens=w.new_tokens, temperature=w.temperature, top_p=w.top_p)
    prompts = phase_prompts(w, steps, args.fixed_lengths)
    keys = [jax.random.fold_in(jax.random.key(1), s) for s in range(steps)]
    ids = [range(len(p)) for p in prompts]

    def per_step():
        return [sampler.generate_rows(p, k, sampling, row_ids=i) for p, k, i in zip(prompts, keys, ids)]

    def batched():
        return phase_decodes.generate_steps(sampler, prompts, keys, ids, sampling)

    times: dict[str, list[float]] = {"per_step": [], "batched": []}
    outputs = {"per_step": per_step(), "batched": batched()}  # compiles
    traces = sampler.traces
    for _ in range(args.repeats):
        for name, fn in (("per_step", per_step), ("batched", batched)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    differ = sum(int(np.sum(a.tokens != b.tokens)) for a, b in zip(outputs["per_step"], outputs["batched"]))
    rows = sum(len(p) for p in prompts)
    max_rows = phase_decodes.phase_rows(sampler, sampling, [r for p in prompts for r in p], w.transitions)
    median = {k: statistics.median(v) for k, v in times.items()}
    return dict(steps=steps, rows=rows, mean_prompt_tokens=float(np.mean([len(r) for p in prompts for r in p])),
                per_step_s=median["per_step"], batched_s=median["batched"], speedup=median["per_step"] / median["batched"],
                rounds=times, batched_max_rows=max_rows, per_step_decodes=steps, compiled_programs=traces,
                sampled_tokens=rows * w.new_tokens, tokens_that_differ=differ)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=("tiny", "base", "paper"), default=["tiny", "base"])
    parser.add_argument("--steps", type=int, default=None, help="critic steps a phase (default: the workload's, "
                        "base: 8)")
    parser.add_argument("--base-micro-batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fixed-lengths", action="store_true", help="every prompt at the workload's observation length")
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    info, table, results = machine(), [], {}
    with tempfile.TemporaryDirectory() as tmp:  # any tokenizer will do: the prompts are token ids
        tokenizer = models.load_tokenizer(tiny.build_tiny("gpt2", Path(tmp) / "tok"))
        for size in args.sizes:
            w = workloads(args.base_micro_batches)[size]
            steps = args.steps or (8 if size == "base" else w.critic_epochs)
            results[size] = r = bench(w, steps, args, tokenizer)
            table.append(dict(size=size, steps=steps, rows=r["rows"], per_step=r["per_step_s"], batched=r["batched_s"],
                              speedup=r["speedup"], max_rows=r["batched_max_rows"], differ=r["tokens_that_differ"]))
            print(f"{size}: {r}", flush=True)
    print(f"\n{info['device_kind'] or info['backend']} x{info['device_count']}, {info['cpu_count']} CPUs, {info['date']}")
    print_table(table, [("size", "size", ""), ("steps", "steps", ""), ("rows", "rows", ""),
                        ("per_step", "per step s", ".3f"), ("batched", "batched s", ".3f"),
                        ("speedup", "speedup x", ".2f"), ("max_rows", "rows a decode", ""),
                        ("differ", "tokens differing", "")])
    name = f"pi_phase_{jax.default_backend()}" + (f"_{args.tag}" if args.tag else "")
    print(f"wrote {write_result(name, dict(vars(args), out=str(args.out)), table, args.out, extra=dict(results=results))}")


if __name__ == "__main__":
    main()
