"""Rollouts that never wait: iteration wall time and env samples per second of serial collection
against collection one iteration ahead (``rollout.staleness=1``) and against that plus continuous
batching (``rollout.slots``), and the learning curve of 20Q tiny at staleness 0 and 1.

Timing cases (ArCHer, the train app, every mode from the same SFT warm start via ``init_from``):

* ``20q_tiny``: ``configs/20q.py:tiny`` (the embedded knowledge-base oracle: a fast env).
* ``webshop_50ms``: ``configs/webshop.py:tiny`` with 64 sessions per iteration (where the tiny
  preset has 16: the official setting plays 512, and there the rollout is most of the time)
  against the local WebShop stand-in of the tests (tests/envs/fake_webshop.py), which waits 50 ms
  before each answer: a slow env server.
* ``20q_t5``: ``configs/20q.py:tiny`` with a flan-t5-small-shaped T5 oracle (random weights: its
  answers are noise, its cost is the real oracle's): an env that computes.
* ``20q_base`` (for a GPU or TPU): ``configs/20q.py``, the paper's setting (128 dialogues, 50
  critic and 3 actor steps per iteration, the actor learning from iteration 2), with a random
  base-size GPT-2 and RoBERTa built on the spot (``accelerator.py --build-models``: nothing is
  downloaded) and the embedded oracle; ``--smoke`` runs it at the ``micro`` shapes.

Each run takes ``--iterations`` iterations with no evaluation in between; the figures are over
the iterations after the first (which compiles) and before the last, each of which collects one
rollout in every mode: mean seconds per iteration, env samples collected per second of those
iterations, and the seconds of each phase. The learning runs are
``benchmarks/learning.py``'s (``configs/20q.py:tiny``, 3 seeds), at staleness 0 and 1.

    python benchmarks/rollout_overlap.py                        # timing, then learning (--jobs 2)
    python benchmarks/rollout_overlap.py --skip-learning        # timing only
    python benchmarks/rollout_overlap.py --skip-timing --jobs 2 # learning only
    python benchmarks/rollout_overlap.py --cases 20q_base --skip-learning --iterations 4 --out DIR  # a GPU

Finished runs are not trained again (the benchmark resumes with the same command). Writes
``benchmarks/results/rollout_overlap.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import learning
from common import RESULTS, machine, portable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.envs import fake_webshop  # noqa: E402  (the WebShop stand-in the tests serve)

TINY = "configs/20q.py:tiny"
MODES = {  # mode: overrides
    "serial": [],
    "ahead": ["rollout.staleness=1"],
    "ahead_slots": ["rollout.staleness=1", "rollout.slots={slots}"],
}
LATENCY_S = 0.05


class SlowShop(fake_webshop.Shop):
    """The WebShop stand-in, answering each request after :data:`LATENCY_S`."""

    def handle_one_request(self):
        time.sleep(LATENCY_S)
        super().handle_one_request()


def train(config: str, workdir: Path, overrides: list[str], log: Path | None = None) -> dict:
    """Runs the train app (or finds it finished); its summary and history. Its output is appended to
    ``log`` (default: the run's own ``train.log``)."""
    summary = learning.finished_summary(workdir)
    if summary is None:
        workdir.mkdir(parents=True, exist_ok=True)
        log = log or workdir / "train.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "archer_jax.train", f"--config={config}", f"--workdir={workdir}",
               *[f"--config.{o}" for o in overrides]]
        with log.open("a") as f:
            f.write(f"==> {workdir.parent.name}/{workdir.name}\n")
            f.flush()
            done = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=f,
                                  stderr=subprocess.STDOUT)
        if done.returncode:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"{workdir} failed (exit {done.returncode}); the end of {log}:\n{tail}")
        summary = json.loads((workdir / "summary.json").read_text())
    history = [json.loads(line) for line in (workdir / "history.jsonl").read_text().splitlines()]
    return dict(summary=summary, history=history)


def timing_row(case: str, mode: str, run: dict) -> dict:
    """Seconds per iteration and env samples collected per second in the steady state: the
    iterations after the first (which compiles; one ahead, it also collects two rollouts) and
    before the last (one ahead, it collects none), each of which collects one rollout."""
    rows = run["history"][1:-1]
    seconds = sum(r["time/iteration"] for r in rows)
    samples = run["history"][-2]["env_samples"] - run["history"][0]["env_samples"]
    phases = sorted({k for r in rows for k in r if k.startswith("time/") and k != "time/iteration"})
    return dict(case=case, mode=mode, iterations=len(rows), iteration_s=seconds / len(rows),
                env_samples=samples, samples_per_s=samples / seconds,
                **{k.removeprefix("time/") + "_s": statistics.mean(r.get(k, 0.0) for r in rows) for k in phases})


def base_models(directory: Path, smoke: bool) -> Path:
    """Random base-size GPT-2 and RoBERTa (tiny ones with ``smoke``) in ``directory``, built once on
    the CPU in a subprocess of their own (so that this process never claims the accelerator)."""
    if not (directory / "roberta" / "config.json").is_file():
        cmd = [sys.executable, str(ROOT / "benchmarks" / "accelerator.py"), "--build-models", str(directory)]
        subprocess.run(cmd + (["--smoke"] if smoke else []), cwd=ROOT, check=True,
                       env=dict(os.environ, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1"))
    return directory


@contextlib.contextmanager
def case_setup(case: str, workdir: Path, warm: Path | None, smoke: bool = False):
    """(config, overrides) of a timing case, with its server, oracle or models ready."""
    common = ["eval_freq=0", "save_freq=1000", "eval_size=4"]
    if case == "20q_base":
        models = base_models(workdir / ("models_smoke" if smoke else "models_base"), smoke)
        yield ("configs/20q.py:micro" if smoke else "configs/20q.py"), common + [
            f"model.policy={models / 'gpt2'}", f"model.critic={models / 'roberta'}", "sft.steps=0", "warmup_iter=1",
            f"rollout_size={4 if smoke else 128}"]
        return
    if case == "20q_tiny":
        yield TINY, common + [f"init_from={warm}", "sft.steps=0"]
    elif case == "20q_t5":
        oracle = workdir / "t5_oracle"
        if not (oracle / "config.json").is_file():
            import oracle as oracle_benchmark  # benchmarks/oracle.py: a random flan-t5-small

            oracle_benchmark.build(oracle)
        yield TINY, common + [f"init_from={warm}", "sft.steps=0", f"env.options.oracle=t5:{oracle}"]
    elif case == "webshop_50ms":
        with fake_webshop.serve(SlowShop) as url:
            goals = f"(0,{len(fake_webshop.INSTRUCTIONS)})"
            yield "configs/webshop.py:tiny", common + [f"env.options.base_url={url}", f"env.options.train_goals={goals}",
                                                       f"env.options.eval_goals={goals}", "rollout_size=64"]
    else:
        raise ValueError(case)


def timing(args, done=lambda rows: None) -> list[dict]:
    """The timing rows, each case and mode; ``done(rows)`` after each run."""
    workdir = args.workdir / "timing"
    # One SFT warm start (one iteration after it) that every tiny 20Q mode starts from.
    warm = workdir / "warm_start" if {"20q_tiny", "20q_t5"} & set(args.cases) else None
    if warm:
        train(TINY, warm, ["iterations=1", "eval_freq=0"])
    rows = []
    for case in args.cases:
        for mode in args.modes:
            with case_setup(case, workdir, warm, args.smoke) as (config, overrides):
                rollout = int(next((o.split("=")[1] for o in overrides if o.startswith("rollout_size=")), 32))
                slots = args.slots or rollout // 2
                extra = [o.format(slots=slots) for o in MODES[mode]]
                run = train(config, workdir / case / mode, overrides + [f"iterations={args.iterations}"] + extra,
                            args.train_log)
            row = timing_row(case, mode, run)
            rows.append(dict(row, slots=slots if "slots" in mode else 0, per_iteration=[
                {k: v for k, v in r.items() if k == "iteration" or k.startswith("time/")} for r in run["history"]]))
            print(f"{case:>13} {mode:>11}: {row['iteration_s']:.2f} s/iteration, {row['samples_per_s']:.1f} env samples/s",
                  flush=True)
            for row in rows:
                serial = next((r for r in rows if r["case"] == row["case"] and r["mode"] == "serial"), None)
                row["speedup_samples_per_s"] = row["samples_per_s"] / serial["samples_per_s"] if serial else None
            done(rows)
    return rows


def learning_runs(args) -> dict:
    """20Q tiny, 3 seeds, at staleness 0 and 1: final returns and curves."""
    jobs = [(mode, seed) for seed in args.seeds for mode in ("serial", "ahead")]
    overrides = {"serial": [], "ahead": ["rollout.staleness=1"]}

    def one(mode: str, seed: int) -> dict:
        summary = learning.run_one(TINY, args.workdir / "learning" / mode, "archer", seed, overrides[mode])
        return dict(summary, agent=mode)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        summaries = list(pool.map(lambda j: one(*j), jobs))
    quality = learning.aggregate(summaries)
    serial = next(q for q in quality if q["agent"] == "serial")
    for q in quality:
        q["within_serial_spread"] = serial["after_min"] <= q["after_mean"] <= serial["after_max"]
    return dict(quality=quality, curves=learning.curves(summaries),
                runs=[dict(mode=s["agent"], seed=s["config"]["seed"], evals=s["evals"], env_samples=s["env_samples"],
                           wall_time_s=s["wall_time_s"]) for s in summaries])


def markdown(rows: list[dict], learned: dict | None) -> str:
    lines = []
    if rows:
        lines += ["| case | mode | s / iteration | env samples / s | vs serial | rollout s | rollout wait s "
                  "| critic s | actor s |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            speedup = r.get("speedup_samples_per_s")
            cells = [r["case"], r["mode"] + (f" ({r['slots']} slots)" if r["slots"] else ""), f"{r['iteration_s']:.2f}",
                     f"{r['samples_per_s']:.1f}", f"{speedup:.2f}x" if speedup else "-"]
            cells += [f"{r[k]:.2f}" if r.get(k) is not None else "-" for k in ("rollout_s", "rollout_wait_s",
                                                                              "critic_s", "actor_s")]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if learned:
        lines += [learning.table(learned["quality"]), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["20q_tiny", "webshop_50ms", "20q_t5"],
                        choices=["20q_tiny", "webshop_50ms", "20q_t5", "20q_base"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--iterations", type=int, default=6, help="per timing run (at least 3)")
    parser.add_argument("--slots", type=int, default=None,
                        help="slots of the continuous-batching mode (default: half of each case's rollout)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="learning runs trained at once")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-learning", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="20q_base at the micro shapes, with tiny models")
    parser.add_argument("--train-log", type=Path, default=None,
                        help="one file for every timing run's output (default: each run's train.log)")
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "rollout_overlap")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.workdir = args.workdir.resolve()

    start = time.perf_counter()
    path = args.out / "rollout_overlap.json"
    previous = json.loads(path.read_text()) if path.is_file() else {}
    learned = previous.get("learning")

    def write(rows: list[dict], learned: dict | None) -> str:
        # machine() only once every run is over: this process claims no accelerator while they train.
        result = dict(benchmark="rollout_overlap", machine=machine() if finished else None, latency_s=LATENCY_S,
                      config=dict(vars(args), workdir=str(args.workdir), out=str(args.out)),
                      seconds=time.perf_counter() - start, rows=rows, learning=learned)
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(portable(result), indent=2) + "\n")
        text = markdown(rows, learned)
        (args.out / "rollout_overlap.md").write_text(text)
        return text

    finished = False
    rows = previous.get("rows", []) if args.skip_timing else timing(args, lambda rows: write(rows, learned))
    if not args.skip_learning:
        learned = learning_runs(args)
    finished = True
    print(write(rows, learned))
    print(f"wrote {path} and rollout_overlap.md ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
