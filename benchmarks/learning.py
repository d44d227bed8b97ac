"""Learning quality: ArCHer vs online filtered BC vs CHAI on the embedded 20Q preset, several seeds.

Every run is the training app on the same config (``configs/20q.py:tiny`` unless ``--config``
says otherwise) with only ``agent`` and ``seed`` changed, so all agents get the same SFT warm start,
the same rollout budget (``iterations x rollout_size`` dialogues, hence near-equal env samples)
and the same fixed greedy-eval games. Runs go in ``--workdir/<agent>_seed<seed>``; a finished run
is not re-trained (the app resumes from its last checkpoint), so an interrupted benchmark can be
re-started with the same command.

    python benchmarks/learning.py --jobs 2
    python benchmarks/learning.py --agents archer chai --seeds 0 1 2 --override iterations=10

Writes ``benchmarks/results/learning.json`` (every eval of every run), ``learning.png`` (mean eval
return vs env samples, band = min..max over seeds) and ``learning.md`` (the table it prints).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import RESULTS, machine, portable

ROOT = Path(__file__).resolve().parent.parent
AGENTS = ("archer", "filtered_bc", "chai")
LABELS = {"archer": "ArCHer", "filtered_bc": "filtered BC (online)", "chai": "CHAI"}


def run_one(config: str, workdir: Path, agent: str, seed: int, overrides: list[str]) -> dict:
    """Trains (or finds finished) one run; returns its summary.json plus the wall time spent here."""
    run_dir = workdir / f"{agent}_seed{seed}"
    cmd = [sys.executable, "-m", "archer_jax.train", f"--config={config}", f"--workdir={run_dir}",
           f"--config.agent={agent}", f"--config.seed={seed}"] + [f"--config.{o}" for o in overrides]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "train.log").open("a") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise RuntimeError(f"{agent} seed {seed} failed (exit {done.returncode}); see {run_dir / 'train.log'}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["benchmark_wall_s"] = time.perf_counter() - start
    return summary


def finished_summary(run_dir: Path) -> dict | None:
    """The summary.json of a run that finished all its iterations; None for a run that has none or
    stopped early (a run stopped by a signal or an error writes its summary too, with ``stopped``)."""
    path = run_dir / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    if summary.get("stopped") or summary["iterations"] < summary["config"]["iterations"]:
        return None
    return summary


def aggregate(summaries: list[dict]) -> list[dict]:
    """One row per agent: eval return before/after (mean, spread over seeds), success, env samples."""
    rows = []
    for agent in dict.fromkeys(s["agent"] for s in summaries):
        runs = [s for s in summaries if s["agent"] == agent]
        after = [s["eval_return_after"] for s in runs]
        rows.append(dict(
            agent=agent,
            seeds=len(runs),
            before=statistics.mean(s["eval_return_before"] for s in runs),
            after_mean=statistics.mean(after),
            after_std=statistics.pstdev(after),
            after_min=min(after),
            after_max=max(after),
            success_after=statistics.mean(s["eval_success_after"] for s in runs),
            env_samples=statistics.mean(s["env_samples"] for s in runs),
            wall_s=statistics.mean(s["wall_time_s"] for s in runs),
            per_seed={s["config"]["seed"]: s["eval_return_after"] for s in runs},
        ))
    return rows


def curves(summaries: list[dict]) -> dict[str, dict[str, list[float]]]:
    """Per agent, at each eval point: mean env samples, mean / min / max eval return over seeds."""
    out = {}
    for agent in dict.fromkeys(s["agent"] for s in summaries):
        evals = [s["evals"] for s in summaries if s["agent"] == agent]
        points = min(len(e) for e in evals)
        at = lambda key, i: [e[i][key] for e in evals]  # noqa: E731
        out[agent] = dict(
            env_samples=[statistics.mean(at("env_samples", i)) for i in range(points)],
            mean=[statistics.mean(at("eval/return", i)) for i in range(points)],
            low=[min(at("eval/return", i)) for i in range(points)],
            high=[max(at("eval/return", i)) for i in range(points)],
        )
    return out


def plot(curve: dict, path: Path, title: str, threshold: float | None = None) -> None:
    """Eval return against env samples, one line (mean) and band (min..max over seeds) per agent;
    ``threshold``, when given, as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    beside = len(curve) > 3  # the legend beside the axes, off the curves
    fig, ax = plt.subplots(figsize=(6.4 + 2.6 * beside, 4.2))
    for agent, c in curve.items():
        (line,) = ax.plot(c["env_samples"], c["mean"], marker="o", label=LABELS.get(agent, agent))
        ax.fill_between(c["env_samples"], c["low"], c["high"], color=line.get_color(), alpha=0.2)
    if threshold is not None:
        ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"threshold {threshold:.2f}")
    ax.set_xlabel("env samples (transitions collected)")
    ax.set_ylabel("eval return, 32 fixed games\n(greedy; CHAI: its best of k samples)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if beside:
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(rows: list[dict]) -> str:
    lines = ["| agent | seeds | eval return before | after: mean ± std | min .. max | per seed | success after "
             "| env samples | wall s / run |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        seeds = ", ".join(f"{v:.2f}" for _, v in sorted(r["per_seed"].items()))
        lines.append(f"| {LABELS.get(r['agent'], r['agent'])} | {r['seeds']} | {r['before']:.2f} | "
                     f"{r['after_mean']:.2f} ± {r['after_std']:.2f} | {r['after_min']:.2f} .. {r['after_max']:.2f} | "
                     f"{seeds} | {r['success_after']:.2f} | {r['env_samples']:.0f} | {r['wall_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/20q.py:tiny")
    parser.add_argument("--agents", nargs="+", default=list(AGENTS), choices=AGENTS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "learning")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once (2 fills a 2-core CPU best)")
    parser.add_argument("--override", nargs="*", default=[], help="config overrides for every run, key=value")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true", help="no training: tables and plot from the summaries")
    args = parser.parse_args()

    jobs = [(a, s) for s in args.seeds for a in args.agents]
    start, previous = time.perf_counter(), {}
    if args.report_only:
        summaries = [json.loads((args.workdir / f"{a}_seed{s}" / "summary.json").read_text()) for a, s in jobs]
        previous = json.loads((args.out / "learning.json").read_text()) if (args.out / "learning.json").is_file() else {}
        walls = {(r["agent"], r["seed"]): r.get("benchmark_wall_s") for r in previous.get("runs", [])}
        for s in summaries:
            s["benchmark_wall_s"] = walls.get((s["agent"], s["config"]["seed"]))
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_one, args.config, args.workdir.resolve(), a, s, args.override) for a, s in jobs]
            summaries = [f.result() for f in futures]
    rows = aggregate(summaries)
    curve = curves(summaries)
    title = f"{args.config}: {len(args.seeds)} seeds, band = min..max"
    args.out.mkdir(parents=True, exist_ok=True)
    plot(curve, args.out / "learning.png", title)
    text = table(rows)
    (args.out / "learning.md").write_text(text + "\n")
    result = dict(benchmark="learning", machine=machine(), config=dict(vars(args), workdir=str(args.workdir),
                  out=str(args.out)), seconds=previous.get("seconds") if args.report_only else time.perf_counter() - start,
                  rows=rows, curves=curve,
                  runs=[{k: s[k] for k in ("agent", "env_samples", "episodes", "evals", "sft", "wall_time_s",
                                           "benchmark_wall_s")} | dict(seed=s["config"]["seed"]) for s in summaries])
    (args.out / "learning.json").write_text(json.dumps(portable(result), indent=2) + "\n")  # repo-relative paths
    print(text)
    print(f"wrote {args.out / 'learning.json'}, learning.png, learning.md ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
