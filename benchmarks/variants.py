"""Our programs under two code or compiler variants, A/B in one process (interleaved rounds).

The iteration benchmark compares us with the reference; this one backs the choices inside our
programs with same-process measurements at the workload sizes of :mod:`workload`:

  * ``layers``: the GPT-2 blocks as one ``lax.scan`` (``scan``) or a Python loop (``loop``), in the
    learner's critic and actor programs (``layers.SCAN_MIN_LAYERS`` decides which one the library
    uses);
  * ``prefill`` / ``decode``: the sampler's prefill or decode program compiled with XLA:CPU's
    YNNPACK fusions on (``ynn``) or off (``off``), the other program as the library compiles it;
    timed as whole 32-token generations at the workload's ``a_π`` batch.

    python variants.py --size tiny                      # all three, about two minutes
    python variants.py --size base --what layers        # about ten minutes on 2 cores
Prints medians per variant; writes results/variants_<backend>_<size>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax

from archer_jax import models
from archer_jax.models import layers, tiny
from archer_jax.runtime.xla_flags import DECODE_CPU_OPTIONS
from archer_jax.sampling import decoding
from common import RESULTS, machine, print_table, write_result
from iteration import JaxArcher
from workload import make_data, workloads

YNN = "xla_cpu_experimental_ynn_fusion_type"


@contextlib.contextmanager
def scan_min_layers(value: int):
    """Traces inside this block see ``layers.SCAN_MIN_LAYERS = value``."""
    old, layers.SCAN_MIN_LAYERS = layers.SCAN_MIN_LAYERS, value
    try:
        yield
    finally:
        layers.SCAN_MIN_LAYERS = old


@contextlib.contextmanager
def sampler_options(program: str, ynn: bool):
    """Sampler programs first compiled inside this block build ``program`` ("prefill": the jit
    without donated arguments; "decode": the donating one) with YNNPACK fusions on or off.
    (``decoding.jax`` is the ``jax`` module: build nothing else inside the block.)"""
    real_jit = decoding.jax.jit

    def jit(fn, *args, compiler_options=None, **kwargs):
        is_decode = bool(kwargs.get("donate_argnums"))
        if is_decode == (program == "decode"):
            compiler_options = dict(DECODE_CPU_OPTIONS) if ynn else {YNN: ""}
        return real_jit(fn, *args, compiler_options=compiler_options, **kwargs)

    decoding.jax.jit = jit
    try:
        yield
    finally:
        decoding.jax.jit = real_jit


def learner_steps(ours: JaxArcher, data) -> dict:
    """Zero-argument functions running one critic and one actor program on fixed batches."""
    cs, acs = data.critic_samples[0], data.actor_samples[0]
    critic_batch = ours.critic_batch(cs, ours.generate(cs["policy_observation"]))
    actor_batch = ours.actor_batch(acs, ours.generate(acs["policy_observation"]))

    def critic():
        ours.critic_state, metrics = ours.learner.critic_step(ours.critic_state, critic_batch)
        jax.block_until_ready(metrics)

    def actor():
        ours.actor_state, metrics = ours.learner.actor_step(ours.actor_state, ours.critic_state.params, actor_batch)
        jax.block_until_ready(metrics)

    return {"critic program": critic, "actor program": actor}


def programs(what: str, w, data, tokenizer) -> dict[str, dict[str, Callable[[], None]]]:
    """{variant: {program name: fn}}, each variant built (and compiled) in its own setting."""
    out = {}
    if what == "layers":
        for variant, value in (("scan", 2), ("loop", 10**9)):
            with scan_min_layers(value):
                ours = JaxArcher(w, tokenizer)
                steps = learner_steps(ours, data)
                for fn in steps.values():
                    fn()  # traces and compiles under this setting
            out[variant] = steps
    else:
        prompts = data.critic_samples[0]["policy_observation"]
        for variant in ("ynn", "off"):
            ours = JaxArcher(w, tokenizer)
            generate = functools.partial(ours.generate, prompts)
            with sampler_options(what, variant == "ynn"):
                generate()  # the sampler compiles its programs here
            out[variant] = {f"a_pi generation ({what} variant)": generate}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("tiny", "base"), default="tiny")
    parser.add_argument("--what", nargs="+", choices=("layers", "prefill", "decode"), default=["layers", "prefill", "decode"])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each times every variant once")
    parser.add_argument("--calls", type=int, default=None, help="calls per variant per round (min kept); default 4 tiny, 1 base")
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    calls = args.calls or (4 if args.size == "tiny" else 1)
    w = workloads()[args.size]
    data = make_data(w)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:  # any tokenizer will do: the workload is token ids
        tokenizer = models.load_tokenizer(tiny.build_tiny("gpt2", Path(tmp) / "tok"))
        for what in args.what:
            variants = programs(what, w, data, tokenizer)
            times = {(v, p): [] for v, fns in variants.items() for p in fns}
            for _ in range(args.rounds):
                for (variant, program) in times:
                    fn = variants[variant][program]
                    best = float("inf")
                    for _ in range(calls):
                        start = time.perf_counter()
                        fn()
                        best = min(best, time.perf_counter() - start)
                    times[(variant, program)].append(best)
            for (variant, program), ts in times.items():
                rows.append(dict(size=args.size, what=what, variant=variant, program=program,
                                 median_ms=1e3 * statistics.median(ts), rounds_ms=[round(1e3 * t, 1) for t in ts]))
                print(f"{args.size} {what} {variant} {program}: " + ", ".join(f"{1e3 * t:.1f}" for t in ts) + " ms", flush=True)
    info = machine()
    print(f"\n{info['device_kind'] or info['backend']}, {info['cpu_count']} CPUs, {info['date']}")
    print_table(rows, [("size", "size", ""), ("what", "what", ""), ("variant", "variant", ""), ("program", "program", ""),
                       ("median_ms", "median ms", ".1f")])
    name = f"variants_{jax.default_backend()}_{args.size}" + (f"_{args.tag}" if args.tag else "")
    print(f"wrote {write_result(name, dict(vars(args), out=str(args.out)), rows, args.out)}")


if __name__ == "__main__":
    main()
