"""Offline learning on Twenty Questions: Offline ArCHer (IQL + AWR, τ = 0.9), its SARSA variant
(τ = 0.5), offline filtered BC and offline BC, on one generated dataset, several seeds.

The paper's offline 20Q ordering (OfflineArcher, on LMRL-Gym's data and the flan-t5 oracle) is
IQL+AWR -14.1 > SARSA+AWR -14.5 > filtered BC -15.4 > BC -16.8. This benchmark shows whether the
ordering reproduces in our setting: the embedded 10-object subset and knowledge-base oracle, tiny
models, and a dataset of scripted experts of mixed quality (``--policy_mix``). Every run is the
training app on ``configs/20q_offline.py:tiny`` with only the variant's keys and the seed changed,
on the same dataset (generated once, built once with TFDS) and the same fixed greedy-eval games.

    python benchmarks/offline_learning.py --jobs 2
    python benchmarks/offline_learning.py --seeds 0 --override iterations=10

Writes ``benchmarks/results/offline_learning.{json,png,md}``. Finished runs are not re-trained.
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
VARIANTS = {  # name -> (label, config overrides)
    "iql_awr": ("Offline ArCHer (IQL τ=0.9 + AWR)", ["agent=offline_archer", "learner.expectile=0.9"]),
    "sarsa_awr": ("SARSA (τ=0.5) + AWR", ["agent=offline_archer", "learner.expectile=0.5"]),
    "filtered_bc": ("offline filtered BC (top 10%)", ["agent=offline_filtered_bc", "learner.actor_loss=actor_pg"]),
    "bc": ("offline BC", ["agent=offline_bc", "learner.actor_loss=actor_pg"]),
}
PAPER = {"iql_awr": -14.1, "sarsa_awr": -14.5, "filtered_bc": -15.4, "bc": -16.8}


def make_dataset(workdir: Path, episodes: int, mix: str, seed: int, max_turns: int) -> Path:
    """The shared dataset: expert dialogues of the embedded subset game, in LMRL-Gym's format."""
    data = workdir / "data"
    path = data / "train.json"
    if not path.is_file():
        data.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "archer_jax.data.generate", "--env=20q_subset", f"--episodes={episodes}",
                        f"--policy_mix={mix}", f"--seed={seed}", f"--max_turns={max_turns}", f"--out={path}"],
                       cwd=ROOT, check=True)
    sys.path.insert(0, str(ROOT))
    from archer_jax.data import sources

    sources.prepare("20q_subset", data, workdir / "tfds")  # built once, before the runs read it
    return data


def run_one(config: str, workdir: Path, data: Path, variant: str, seed: int, overrides: list[str]) -> dict:
    run_dir = workdir / f"{variant}_seed{seed}"
    cmd = [sys.executable, "-m", "archer_jax.train", f"--config={config}", f"--workdir={run_dir}",
           f"--config.seed={seed}", f"--config.offline.dataset={data}", f"--config.offline.data_dir={workdir / 'tfds'}"]
    cmd += [f"--config.{o}" for o in VARIANTS[variant][1] + overrides]
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with (run_dir / "train.log").open("a") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise RuntimeError(f"{variant} seed {seed} failed (exit {done.returncode}); see {run_dir / 'train.log'}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.update(variant=variant, benchmark_wall_s=time.perf_counter() - start)
    return summary


def aggregate(summaries: list[dict]) -> list[dict]:
    rows = []
    for variant in VARIANTS:
        runs = [s for s in summaries if s["variant"] == variant]
        if not runs:
            continue
        after = [s["eval_return_after"] for s in runs]
        best = [max(e["eval/return"] for e in s["evals"]) for s in runs]
        rows.append(dict(variant=variant, label=VARIANTS[variant][0], seeds=len(runs), after_mean=statistics.mean(after),
                         after_std=statistics.pstdev(after), per_seed=after, best_mean=statistics.mean(best),
                         success_after=statistics.mean(s["eval_success_after"] for s in runs),
                         before=statistics.mean(s["eval_return_before"] for s in runs), paper=PAPER[variant],
                         wall_s=statistics.mean(s["wall_time_s"] for s in runs)))
    return rows


def plot(summaries: list[dict], steps_per_iteration: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for variant, (label, _) in VARIANTS.items():
        evals = [s["evals"] for s in summaries if s["variant"] == variant]
        if not evals:
            continue
        points = min(len(e) for e in evals)
        x = [evals[0][i]["iteration"] * steps_per_iteration[variant] for i in range(points)]
        values = [[e[i]["eval/return"] for e in evals] for i in range(points)]
        (line,) = ax.plot(x, [statistics.mean(v) for v in values], marker="o", label=label)
        ax.fill_between(x, [min(v) for v in values], [max(v) for v in values], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("policy optimizer steps on the dataset")
    ax.set_ylabel("eval return (greedy, fixed games)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(rows: list[dict]) -> str:
    lines = ["| variant | seeds | eval return after: mean ± std | per seed | best eval (mean) | success after "
             "| paper (LMRL 20Q) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['seeds']} | {r['after_mean']:.2f} ± {r['after_std']:.2f} | "
                     f"{', '.join(f'{v:.2f}' for v in r['per_seed'])} | {r['best_mean']:.2f} | {r['success_after']:.2f} | "
                     f"{r['paper']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/20q_offline.py:tiny")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--policy_mix", default="optimal:0.2,redundant:0.3,random:0.5")
    parser.add_argument("--data_seed", type=int, default=0)
    parser.add_argument("--max_turns", type=int, default=12, help="the tiny preset's env.max_turns")
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "offline_learning")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--override", nargs="*", default=[], help="config overrides for every run, key=value")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true", help="no training: tables and plot from the summaries")
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    start = time.perf_counter()
    jobs = [(v, s) for s in args.seeds for v in args.variants]
    previous = json.loads((args.out / "offline_learning.json").read_text()) if args.report_only else {}
    if args.report_only:
        data = workdir / "data"
        summaries = [json.loads((workdir / f"{v}_seed{s}" / "summary.json").read_text()) | dict(variant=v) for v, s in jobs]
        walls = {(r["variant"], r["seed"]): r.get("benchmark_wall_s") for r in previous.get("runs", [])}
        for summary in summaries:
            summary["benchmark_wall_s"] = walls.get((summary["variant"], summary["config"]["seed"]))
    else:
        data = make_dataset(workdir, args.episodes, args.policy_mix, args.data_seed, args.max_turns)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            summaries = [f.result() for f in [pool.submit(run_one, args.config, workdir, data, v, s, args.override)
                                              for v, s in jobs]]
    config = summaries[0]["config"]
    steps = {v: (config["bc_steps"] if v in ("filtered_bc", "bc") else config["actor_steps"]) for v in VARIANTS}
    rows = aggregate(summaries)
    args.out.mkdir(parents=True, exist_ok=True)
    dataset = json.loads((data / "train.json").read_text())
    returns = [-(len(g["lines"]) - 1) if g["correct"] else -len(g["lines"]) for g in dataset]
    title = (f"{args.config}: {len(dataset)} expert dialogues ({args.policy_mix})\n"
             f"{len(args.seeds)} seeds; mean, band = min..max")
    plot(summaries, steps, args.out / "offline_learning.png", title)
    text = table(rows)
    text += (f"\n\nDataset: {len(dataset)} dialogues, mean return {statistics.mean(returns):.2f}, "
             f"success {statistics.mean(g['correct'] for g in dataset):.2f}.")
    (args.out / "offline_learning.md").write_text(text + "\n")
    seconds = previous.get("seconds") if args.report_only else time.perf_counter() - start
    result = dict(benchmark="offline_learning", machine=machine(), config=dict(vars(args), workdir=str(args.workdir),
                  out=str(args.out)), seconds=seconds, rows=rows,
                  dataset=dict(dialogues=len(dataset), mean_return=statistics.mean(returns),
                               success=statistics.mean(g["correct"] for g in dataset)),
                  runs=[{k: s[k] for k in ("variant", "evals", "wall_time_s", "benchmark_wall_s")}
                        | dict(seed=s["config"]["seed"]) for s in summaries])
    (args.out / "offline_learning.json").write_text(json.dumps(portable(result), indent=2) + "\n")
    print(text)
    print(f"wrote {args.out / 'offline_learning.json'}, offline_learning.png, offline_learning.md "
          f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
