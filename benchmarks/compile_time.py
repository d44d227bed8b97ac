"""How many programs the first training iteration compiles, and how long compiling takes.

Runs the train app (``train_and_evaluate``) in a fresh subprocess on ``--config`` cut to one
iteration with every phase in it (a 2-step SFT warm start, rollouts, critic steps, actor steps
from the first iteration, the "before" and final evaluations), once with an empty persistent
compilation cache (cold) and once more with the cache it left (warm). Every XLA compilation is
counted through ``jax.monitoring``, grouped by program name.

    python benchmarks/compile_time.py                         # configs/20q.py:tiny
    python benchmarks/compile_time.py --tag cpu_tiny          # -> results/compile_time_cpu_tiny.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = dict(iterations=1, warmup_iter=0, eval_freq=1, save_freq=1)
SFT_STEPS = 2


def child(config_arg: str, workdir: str, cache_dir: str) -> dict:
    """In the subprocess: one iteration of the train app, with every compilation recorded."""
    from archer_jax.runtime import xla_flags

    xla_flags.set_default_flags()
    import jax

    events: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seconds: dict[str, float] = collections.defaultdict(float)

    by_name: dict[str, float] = collections.defaultdict(float)

    def listen(event: str, duration: float, fun_name: str = "?", **_) -> None:
        kind = event.rsplit("/", 1)[-1].removesuffix("_duration")
        name = fun_name.removeprefix("jit(").removesuffix(")")
        events[kind][name] += 1
        seconds[kind] += duration
        if kind == "backend_compile":
            by_name[name] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    import importlib.util

    path, _, preset = config_arg.partition(":")
    spec = importlib.util.spec_from_file_location("config", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config(preset)
    for key, value in OVERRIDES.items():
        setattr(c, key, value)
    c.sft.steps = min(c.sft.steps, SFT_STEPS) or SFT_STEPS
    c.compilation_cache = cache_dir  # as a user's run: the app's own cache settings

    from archer_jax.train import train_and_evaluate

    start = time.perf_counter()
    train_and_evaluate(c, workdir)
    compiled = events["backend_compile"]
    ours = ("prefill", "decode", "critic_step", "actor_step", "bc_step", "_q_values", "create")
    return dict(
        wall_s=time.perf_counter() - start,
        programs=sum(compiled.values()),
        programs_by_name={k: v for k, v in sorted(compiled.items()) if k.startswith(ours)},
        other_programs=sum(v for k, v in compiled.items() if not k.startswith(ours)),
        compile_s_by_name={k: round(v, 2) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])},
        trace_s=seconds["jaxpr_trace"],
        lower_s=seconds["jaxpr_to_mlir_module"],
        backend_compile_s=seconds["backend_compile"],
        cache_hits=sum(events["cache_retrieval_time_sec"].values()) if "cache_retrieval_time_sec" in events else None,
    )


def run(config_arg: str, cache_dir: str, label: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="archer_jax_compile_") as workdir:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
        env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        code = f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import compile_time as c; " \
               f"print('RESULT ' + json.dumps(c.child({config_arg!r}, {workdir!r}, {cache_dir!r})))"
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            raise RuntimeError(f"{label} run failed:\n{done.stderr[-3000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        return dict(run=label, **json.loads(line[len("RESULT "):]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/20q.py:tiny")
    parser.add_argument("--tag", default="", help="results/compile_time_<tag>.json (default: print only)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import machine, print_table, write_result

    with tempfile.TemporaryDirectory(prefix="archer_jax_xla_cache_") as cache:
        rows = [run(args.config, cache, "cold"), run(args.config, cache, "warm")]
    print_table(rows, [("run", "run", "s"), ("programs", "programs", "d"), ("other_programs", "other", "d"),
                       ("backend_compile_s", "backend compile s", ".1f"), ("lower_s", "lowering s", ".1f"),
                       ("trace_s", "tracing s", ".1f"), ("wall_s", "wall s", ".1f")])
    for row in rows:
        print(row["run"], row["programs_by_name"])
    if args.tag:
        config = dict(config=args.config, overrides=OVERRIDES, sft_steps=SFT_STEPS, machine=machine())
        print("wrote", write_result(f"compile_time_{args.tag}", config, rows))


if __name__ == "__main__":
    main()
