"""Offline learning on Twenty Questions: Offline ArCHer (IQL + AWR, τ = 0.9), its SARSA variant
(τ = 0.5), offline filtered BC and offline BC, on one generated dataset, several seeds.

The paper's offline 20Q ordering (OfflineArcher, on LMRL-Gym's data and the flan-t5 oracle) is
IQL+AWR -14.1 > SARSA+AWR -14.5 > filtered BC -15.4 > BC -16.8. This benchmark shows whether the
ordering reproduces in our setting: the embedded 10-object subset and knowledge-base oracle, tiny
models, and a dataset of scripted experts of mixed quality (``--policy_mix``). Every run is the
training app on ``configs/20q_offline.py:tiny`` with only the variant's keys and the seed changed,
on the same dataset (generated once, built once with TFDS) and the same fixed greedy-eval games.

    python benchmarks/offline_learning.py --jobs 2
    python benchmarks/offline_learning.py --seeds 0 --override iterations=10 --name offline_short --workdir runs/short
    python benchmarks/offline_learning.py --name offline_convergence --override iterations=120 \
        --workdir runs/offline_convergence --jobs 2 --commit      # to convergence
    python benchmarks/offline_learning.py --name offline_240 --override iterations=240 \
        --workdir runs/offline_convergence --jobs 2 --commit --extend   # those runs, trained on to 240

Writes ``benchmarks/results/{name}.{json,png,md}`` (``--name``, default ``offline_learning``) from
every finished run of the study, again as each run finishes (and with ``--commit`` commits them), so
the benchmark resumes with the same command: a finished run is not trained again, an interrupted one
resumes from its last checkpoint, and a run the results file holds stays in the tables, and is not
trained again, when its workdir is gone (a fresh machine). A study is its config, dataset arguments
and overrides: a results file or workdir of another study is a one-line error, never mixed in.
``--extend`` takes over a workdir whose study differs only in fewer ``iterations=``: its runs resume
from their last checkpoint and train on, exactly as runs of the longer study from the start would
(the train app lets ``iterations`` change and resumes exactly).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from common import RESULTS, commit_files, machine, portable

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {  # name -> (label, config overrides)
    "iql_awr": ("Offline ArCHer (IQL τ=0.9 + AWR)", ["agent=offline_archer", "learner.expectile=0.9"]),
    "sarsa_awr": ("SARSA (τ=0.5) + AWR", ["agent=offline_archer", "learner.expectile=0.5"]),
    "filtered_bc": ("offline filtered BC (top 10%)", ["agent=offline_filtered_bc", "learner.actor_loss=actor_pg"]),
    "bc": ("offline BC", ["agent=offline_bc", "learner.actor_loss=actor_pg"]),
}
PAPER = {"iql_awr": -14.1, "sarsa_awr": -14.5, "filtered_bc": -15.4, "bc": -16.8}
# The arguments that make a study: runs of one are never mixed into another's results or workdir.
STUDY = ("config", "episodes", "policy_mix", "data_seed", "max_turns", "override")
RUN_KEYS = ("variant", "seed", "evals", "wall_time_s", "benchmark_wall_s", "policy_steps_per_iteration")


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


def run_dir(workdir: Path, variant: str, seed: int) -> Path:
    return workdir / f"{variant}_seed{seed}"


def policy_steps(variant: str, config: dict) -> int:
    """Policy optimizer steps per iteration: BC's steps for the BC variants, the actor's otherwise."""
    return config["bc_steps"] if variant in ("filtered_bc", "bc") else config["actor_steps"]


def iterations(overrides: list[str]) -> int | None:
    """The iterations a study's overrides set; None where they leave the config's."""
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == "iterations"]
    return int(values[-1]) if values else None


def finished(workdir: Path, variant: str, seed: int, target: int | None = None) -> dict | None:
    """The run's summary when it ran all its iterations (``target``, else its config's) and was not
    stopped early, else None."""
    path = run_dir(workdir, variant, seed) / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    if summary.get("stopped") or summary["iterations"] < (target or summary["config"]["iterations"]):
        return None
    return summary | dict(variant=variant, seed=seed, policy_steps_per_iteration=policy_steps(variant, summary["config"]))


def run_one(config: str, workdir: Path, data: Path, variant: str, seed: int, overrides: list[str]) -> dict:
    """Trains one run (resuming it where it stopped) and returns its summary."""
    run = run_dir(workdir, variant, seed)
    cmd = [sys.executable, "-m", "archer_jax.train", f"--config={config}", f"--workdir={run}",
           f"--config.seed={seed}", f"--config.offline.dataset={data}", f"--config.offline.data_dir={workdir / 'tfds'}"]
    cmd += [f"--config.{o}" for o in VARIANTS[variant][1] + overrides]
    run.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with (run / "train.log").open("a") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise RuntimeError(f"{variant} seed {seed} failed (exit {done.returncode}); see {run / 'train.log'}")
    summary = finished(workdir, variant, seed, iterations(overrides))
    if summary is None:
        raise RuntimeError(f"{variant} seed {seed} stopped before its last iteration; see {run / 'train.log'}")
    return summary | dict(benchmark_wall_s=time.perf_counter() - start)


def gather(workdir: Path, kept: dict, target: int | None, walls: dict | None = None) -> dict[tuple[str, int], dict]:
    """Every finished run of the study (of ``target`` iterations) by (variant, seed): those ``kept``
    (``recorded``) holds, and the finished runs in the workdir in their place; ``walls`` gives the
    wall time of runs trained here."""
    runs = dict(kept)
    for variant in VARIANTS:
        for path in sorted(workdir.glob(f"{variant}_seed*/summary.json")):
            seed = int(path.parent.name.rsplit("_seed", 1)[1])
            if (summary := finished(workdir, variant, seed, target)) is not None:
                wall = (walls or {}).get((variant, seed), kept.get((variant, seed), {}).get("benchmark_wall_s"))
                runs[(variant, seed)] = summary | dict(benchmark_wall_s=wall)
    return runs


def shorter(theirs: dict, study: dict) -> bool:
    """Whether ``theirs`` is ``study`` but for fewer iterations: its runs can train on to ``study``'s."""
    def rest(s: dict) -> dict:
        return dict(s, override=[o for o in s.get("override", []) if o.split("=", 1)[0] != "iterations"])

    mine, its = iterations(study["override"]), iterations(theirs.get("override", []))
    return rest(theirs) == rest(study) and mine is not None and its is not None and its < mine


def check_study(path: Path, theirs: dict, study: dict) -> None:
    """Exits with a one-line error when the runs at ``path`` belong to another study than ``study``."""
    differ = [k for k in STUDY if theirs.get(k) != study[k]]
    if differ:
        k = differ[0]
        hint = ("; --extend trains its runs on to this study's iterations" if shorter(theirs, study) and path.is_dir()
                else "")
        raise SystemExit(f"{path}: holds runs of another study ({k}: {theirs.get(k)!r} there, {study[k]!r} here); "
                         f"pass another --name (results) and --workdir, or move it away{hint}")


def recorded(path: Path, study: dict) -> tuple[dict[tuple[str, int], dict], dict]:
    """The runs the results file at ``path`` holds, by (variant, seed), in the shape of a finished
    run's summary, and the file itself: a run whose workdir is gone (another machine, a cleaned
    disk) stays in the tables and is not trained again."""
    if not path.is_file():
        return {}, {}
    try:
        result = json.loads(path.read_text())
        runs, config = result["runs"], result["config"]
    except (ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"{path}: not an offline_learning results file ({error}); move it away to start afresh")
    check_study(path, config, study)
    kept = {}
    for run in runs:
        evals = run["evals"]
        if run["variant"] in VARIANTS and evals:
            kept[(run["variant"], run["seed"])] = dict(
                run, eval_return_before=evals[0]["eval/return"], eval_return_after=evals[-1]["eval/return"],
                eval_success_after=evals[-1]["eval/success"])
    return kept, result


def last_quarter(evals: list[dict]) -> float:
    """The mean eval return over a run's last quarter of iterations: one evaluation swings by a few
    points on 32 games, so a converged run is read on this, not on its last evaluation alone."""
    end = evals[-1]["iteration"]
    return statistics.mean(e["eval/return"] for e in evals if e["iteration"] >= 0.75 * end)


def quarters(evals: list[dict]) -> list[float | None]:
    """The mean eval return in each quarter of a run's iterations, ``(k/4, (k+1)/4]`` of its end (the
    start's evaluation left out, so the 4th leaves out the one at 3/4 that :func:`last_quarter`
    takes): whether a run still climbs at its end or has flattened. None for a quarter with no
    evaluation."""
    end = evals[-1]["iteration"]
    parts = [[e["eval/return"] for e in evals if k * end / 4 < e["iteration"] <= (k + 1) * end / 4] for k in range(4)]
    return [statistics.mean(p) if p else None for p in parts]


def aggregate(summaries: list[dict]) -> list[dict]:
    rows = []
    for variant in VARIANTS:
        runs = [s for s in summaries if s["variant"] == variant]
        if not runs:
            continue
        after = [s["eval_return_after"] for s in runs]
        best = [max(e["eval/return"] for e in s["evals"]) for s in runs]
        tail = [last_quarter(s["evals"]) for s in runs]
        parts = [quarters(s["evals"]) for s in runs]
        rows.append(dict(variant=variant, label=VARIANTS[variant][0], seeds=len(runs), after_mean=statistics.mean(after),
                         after_std=statistics.pstdev(after), per_seed=after, best_mean=statistics.mean(best),
                         tail_mean=statistics.mean(tail), tail_std=statistics.pstdev(tail), tail_per_seed=tail,
                         quarters=[statistics.mean(q) if None not in q else None for q in zip(*parts)],
                         steps=max(s["evals"][-1]["iteration"] * s["policy_steps_per_iteration"] for s in runs),
                         success_after=statistics.mean(s["eval_success_after"] for s in runs),
                         before=statistics.mean(s["eval_return_before"] for s in runs), paper=PAPER[variant],
                         wall_s=statistics.mean(s["wall_time_s"] for s in runs)))
    return rows


def plot(summaries: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for variant, (label, _) in VARIANTS.items():
        evals = [s["evals"] for s in summaries if s["variant"] == variant]
        if not evals:
            continue
        points = min(len(e) for e in evals)
        steps = next(s["policy_steps_per_iteration"] for s in summaries if s["variant"] == variant)
        x = [evals[0][i]["iteration"] * steps for i in range(points)]
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
    lines = ["| variant | seeds | eval return after: mean ± std | per seed | last quarter's evals: mean ± std "
             "| per seed | best eval (mean) | success after | paper (LMRL 20Q) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['seeds']} | {r['after_mean']:.2f} ± {r['after_std']:.2f} | "
                     f"{', '.join(f'{v:.2f}' for v in r['per_seed'])} | {r['tail_mean']:.2f} ± {r['tail_std']:.2f} | "
                     f"{', '.join(f'{v:.2f}' for v in r['tail_per_seed'])} | {r['best_mean']:.2f} | "
                     f"{r['success_after']:.2f} | {r['paper']} |")
    return "\n".join(lines)


def quarters_table(rows: list[dict]) -> str:
    """Mean eval return over seeds in each quarter of the runs' policy steps: flat at the end or climbing."""
    lines = ["| variant | policy steps | 1st quarter | 2nd | 3rd | 4th | 4th - 3rd |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        q = [f"{v:.2f}" if v is not None else "-" for v in r["quarters"]]
        gain = f"{r['quarters'][3] - r['quarters'][2]:+.2f}" if None not in r["quarters"][2:] else "-"
        lines.append(f"| {r['label']} | {r['steps']} | {' | '.join(q)} | {gain} |")
    return "\n".join(lines)


def write(args: argparse.Namespace, summaries: list[dict], dataset: dict, seconds: float | None) -> str:
    """``{name}.{json,png,md}`` in ``--out`` from ``summaries`` (every finished run of the study)."""
    summaries = sorted(summaries, key=lambda s: (s["seed"], list(VARIANTS).index(s["variant"])))
    rows = aggregate(summaries)
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = sorted({s["seed"] for s in summaries})
    title = (f"{args.config}: {dataset['dialogues']} expert dialogues ({args.policy_mix})\n"
             f"{len(seeds)} seeds; mean, band = min..max")
    plot(summaries, args.out / f"{args.name}.png", title)
    text = table(rows)
    text += ("\n\nMean eval return over the seeds in each quarter of the runs' policy steps (after the start's "
             "evaluation; a quarter's first evaluation is the one after its start, so the 4th leaves out the one "
             "at 3/4 that the last-quarter column takes):\n\n" + quarters_table(rows))
    text += (f"\n\nDataset: {dataset['dialogues']} dialogues, mean return {dataset['mean_return']:.2f}, "
             f"success {dataset['success']:.2f}.")
    (args.out / f"{args.name}.md").write_text(text + "\n")
    result = dict(benchmark="offline_learning", machine=machine(), config=dict(vars(args), workdir=str(args.workdir),
                  out=str(args.out), seeds=seeds), seconds=seconds, rows=rows, dataset=dataset,
                  runs=[{k: s.get(k) for k in RUN_KEYS} for s in summaries])
    (args.out / f"{args.name}.json").write_text(json.dumps(portable(result), indent=2) + "\n")
    return text


def dataset_stats(data: Path) -> dict:
    dataset = json.loads((data / "train.json").read_text())
    returns = [-(len(g["lines"]) - 1) if g["correct"] else -len(g["lines"]) for g in dataset]
    return dict(dialogues=len(dataset), mean_return=statistics.mean(returns),
                success=statistics.mean(g["correct"] for g in dataset))


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
    parser.add_argument("--name", default="offline_learning", help="the results files' name: another study, another name")
    parser.add_argument("--report-only", action="store_true", help="no training: tables and plot from the finished runs")
    parser.add_argument("--commit", action="store_true", help="git-commit the results files after each finished run")
    parser.add_argument("--extend", action="store_true",
                        help="the workdir holds a study with fewer iterations: train its runs on to this one's "
                             "(its own results file keeps its runs; the workdir becomes this study's)")
    args = parser.parse_args()

    start, walls = time.perf_counter(), {}
    workdir = args.workdir.resolve()
    study, target = {k: getattr(args, k) for k in STUDY}, iterations(args.override)
    kept, previous = recorded(args.out / f"{args.name}.json", study)
    marker = workdir / "study.json"
    theirs = json.loads(marker.read_text()) if marker.is_file() else None
    if theirs is not None and not (args.extend and shorter(theirs, study)):
        check_study(workdir, theirs, study)
    runs = gather(workdir, kept, target)
    todo = [] if args.report_only else [(v, s) for s in args.seeds for v in args.variants if (v, s) not in runs]
    if todo:
        workdir.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(study) + "\n")
        data = make_dataset(workdir, args.episodes, args.policy_mix, args.data_seed, args.max_turns)
        dataset = dataset_stats(data)
        if previous.get("dataset") and {k: round(v, 6) for k, v in dataset.items()} != {
                k: round(v, 6) for k, v in previous["dataset"].items()}:
            raise SystemExit(f"{data / 'train.json'}: not the dataset {args.out / args.name}.json's runs trained on "
                             f"({dataset} here, {previous['dataset']} there)")
    elif previous.get("dataset"):
        dataset = previous["dataset"]
    elif (workdir / "data" / "train.json").is_file():
        dataset = dataset_stats(workdir / "data")
    else:
        raise SystemExit(f"nothing to report: no finished run in {workdir} or {args.out / args.name}.json")
    # Nothing to train: the tables again, from the finished runs (else they are written as runs finish).
    text = write(args, list(runs.values()), dataset, previous.get("seconds")) if runs and not todo else ""
    last = start
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, args.config, workdir, data, v, s, args.override): (v, s) for v, s in todo}
        for future in as_completed(futures):
            variant, seed = futures[future]
            try:
                summary = future.result()
            except RuntimeError as error:  # one failed run (its train.log says why) stops no other
                print(error, flush=True)
                continue
            # From the results file and workdir as they are now: another invocation may have added runs.
            kept, previous = recorded(args.out / f"{args.name}.json", study)
            walls[(variant, seed)] = summary["benchmark_wall_s"]
            now = time.perf_counter()
            text = write(args, list(gather(workdir, kept, target, walls).values()), dataset,
                         (previous.get("seconds") or 0.0) + now - last)
            last = now
            print(f"{variant} seed {seed}: eval return {summary['eval_return_before']:.2f} -> "
                  f"{summary['eval_return_after']:.2f}", flush=True)
            if args.commit:
                commit_files([args.out / f"{args.name}.{ext}" for ext in ("json", "png", "md")],
                             f"{args.name}: {variant} seed {seed} finished (eval return "
                             f"{summary['eval_return_before']:.2f} -> {summary['eval_return_after']:.2f})")
    print(text)
    print(f"wrote {args.out / args.name}.json, .png, .md ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
