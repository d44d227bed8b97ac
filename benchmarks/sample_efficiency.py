"""Sample efficiency on the embedded 20Q: ArCHer vs token-level PPO with each advantage estimator,
online filtered BC and CHAI (the paper's claim: ArCHer needs about 100x fewer samples than PPO).

Every run is the train app on the tiny preset (``configs/20q.py:tiny``, or ``configs/20q_ppo.py:tiny``
for PPO: the same models, SFT warm start, rollouts of 32 dialogues per iteration, 30 iterations
and fixed evaluation games), only the agent, the estimator and the seed changed. The x-axis is env
samples (transitions collected). For each method and seed, the samples needed to reach a return
threshold (default: halfway from the SFT start to ArCHer's final mean return) are taken two ways:
at the first eval point at or above it, and at the first one from which every later eval stays at
or above it (a run that touches it and falls back has not reached it). The table gives each one's
mean over the seeds that got there and its ratio to ArCHer's. A finished run is not re-trained, so an interrupted benchmark resumes with the same command.

    python benchmarks/sample_efficiency.py --jobs 2
    python benchmarks/sample_efficiency.py --methods ppo_gae ppo_grpo --seeds 0 --jobs 2
    python benchmarks/sample_efficiency.py --reuse-learning   # ArCHer, filtered BC, CHAI from learning.json
    python benchmarks/sample_efficiency.py --reuse-learning --finished-only   # tables the runs finished so far

``--reuse-learning`` takes the ArCHer, filtered BC and CHAI runs of ``benchmarks/results/learning.json``
(the same preset; see its date and machine) instead of training them again, for each of the three
that has no finished run in ``--workdir``. Writes
``benchmarks/results/sample_efficiency.{json,png,md}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import learning
from common import RESULTS, machine, portable

ROOT = Path(__file__).resolve().parent.parent
TWENTY_Q, PPO = "configs/20q.py:tiny", "configs/20q_ppo.py:tiny"
# method: (label, config, agent, overrides)
METHODS = {
    "archer": ("ArCHer", TWENTY_Q, "archer", []),
    "ppo_gae": ("PPO + gae", PPO, "ppo", ["ppo.adv_estimator=gae"]),
    "ppo_grpo": ("PPO + grpo", PPO, "ppo", ["ppo.adv_estimator=grpo", "rollout_group_size=4"]),
    "ppo_archer_ragen": ("PPO + archer_ragen", PPO, "ppo", ["ppo.adv_estimator=archer_ragen"]),
    "ppo_archer_hierarchical": ("PPO + archer_hierarchical (λ = 1, not whitened)", PPO, "ppo",  # its unbiased form
                                ["ppo.adv_estimator=archer_hierarchical", "ppo.lam=1.0", "ppo.whiten=False"]),
    "ppo_archer_hierarchical_cb": ("PPO + archer_hierarchical − V(s) (λ = 1, not whitened)", PPO, "ppo",
                                   ["ppo.adv_estimator=archer_hierarchical", "ppo.lam=1.0", "ppo.whiten=False",
                                    "ppo.critic_baseline=True"]),
    "filtered_bc": ("filtered BC (online)", TWENTY_Q, "filtered_bc", []),
    "chai": ("CHAI", TWENTY_Q, "chai", []),
}
REUSABLE = {"archer", "filtered_bc", "chai"}  # benchmarks/learning.py trains these on the same preset


def train(method: str, seed: int, workdir: Path) -> dict:
    """One run's summary (trained now, or found finished), labelled with the method."""
    label, config, agent, overrides = METHODS[method]
    summary = learning.run_one(config, workdir / method, agent, seed, overrides)
    return dict(summary, agent=label, method=method)


def finished(method: str, seed: int, workdir: Path) -> dict | None:
    """A run of ``workdir`` that has finished (its summary.json), labelled with the method; None if it has not."""
    label, _, agent, _ = METHODS[method]
    summary = learning.finished_summary(workdir / method / f"{agent}_seed{seed}")
    return None if summary is None else dict(summary, agent=label, method=method)


def reused(method: str, seed: int, previous: dict) -> dict:
    """A run of benchmarks/results/learning.json in the shape of a summary."""
    run = next(r for r in previous["runs"] if r["agent"] == method and r["seed"] == seed)
    evals = run["evals"]
    return dict(agent=METHODS[method][0], method=method, evals=evals, env_samples=run["env_samples"],
                eval_return_before=evals[0]["eval/return"], eval_return_after=evals[-1]["eval/return"],
                eval_success_after=evals[-1]["eval/success"], wall_time_s=run["wall_time_s"],
                benchmark_wall_s=run.get("benchmark_wall_s"), config=dict(seed=seed), reused_from="learning.json")


def samples_to(evals: list[dict], threshold: float) -> float | None:
    """Env samples at the first evaluation whose return reaches ``threshold`` (None: never)."""
    return next((e["env_samples"] for e in evals if e["eval/return"] >= threshold), None)


def samples_held(evals: list[dict], threshold: float) -> float | None:
    """Env samples at the first evaluation from which every later one stays at or above
    ``threshold`` (None: the last one is below it). A run that touches the threshold once and
    falls back (greedy evals on 32 games are noisy; some methods collapse) has not reached it."""
    held = None
    for e in reversed(evals):
        if e["eval/return"] < threshold:
            break
        held = e["env_samples"]
    return held


def _mean(values: dict) -> float | None:
    hits = [v for v in values.values() if v is not None]
    return statistics.mean(hits) if hits else None


def efficiency(summaries: list[dict], threshold: float, reference: str = "archer") -> list[dict]:
    """Per method and seed: the samples to first reach the threshold and the samples from which the
    return stays at or above it; each one's mean over the seeds that got there, and its ratio to
    that of ``reference`` (ArCHer unless named: the method the ratios are to)."""
    rows = []
    for method in dict.fromkeys(s["method"] for s in summaries):
        runs = [s for s in summaries if s["method"] == method]
        reached = {s["config"]["seed"]: samples_to(s["evals"], threshold) for s in runs}
        held = {s["config"]["seed"]: samples_held(s["evals"], threshold) for s in runs}
        rows.append(dict(method=method, label=runs[0]["agent"], seeds=len(runs),
                         samples_to_threshold=reached, reached=sum(v is not None for v in reached.values()),
                         mean_samples=_mean(reached),
                         samples_held=held, held=sum(v is not None for v in held.values()), mean_held=_mean(held),
                         total_samples=statistics.mean(s["env_samples"] for s in runs)))
    archer = next((r for r in rows if r["method"] == reference), None)
    for r in rows:
        r["reference"] = reference
        for key, ratio in (("mean_samples", "ratio_to_archer"), ("mean_held", "held_ratio_to_archer")):
            base = archer[key] if archer else None
            r[ratio] = r[key] / base if base and r[key] is not None else None
    return rows


def _cells(r: dict, per_seed: str, mean: str, ratio: str, count: str, archer: dict | None) -> list[str]:
    seeds = ", ".join("never" if v is None else f"{v:.0f}" for _, v in sorted(r[per_seed].items()))
    if r[mean] is None:  # no seed got there: more than the run's samples, over ArCHer's
        base = archer[mean] if archer else None
        return [seeds, f"- (0/{r['seeds']})", f"> {r['total_samples'] / base:.2f}x" if base else "-"]
    ratio_text = f"{r[ratio]:.2f}x" if r[ratio] is not None else "-"
    return [seeds, f"{r[mean]:.0f} ({r[count]}/{r['seeds']})", ratio_text]


def table(rows: list[dict], quality: list[dict], threshold: float, measure: str = "eval return") -> str:
    """The markdown table: final returns (``measure``), samples to first reach the threshold, samples
    from which it holds."""
    after = {q["agent"]: q for q in quality}
    reference = rows[0].get("reference", "archer") if rows else "archer"
    archer = next((r for r in rows if r["method"] == reference), None)
    lines = [] if reference == "archer" or archer is None else [f"Ratios to ArCHer are to {archer['label']}.", ""]
    lines += [f"| method | {measure} before | after: mean ± std | first ≥ {threshold:.2f}: env samples per seed "
              f"| mean (seeds) | ratio to ArCHer | stays ≥ {threshold:.2f} from: env samples per seed | mean (seeds) "
              "| ratio to ArCHer | env samples in all | wall s / run |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        q = after[r["label"]]
        cells = [r["label"], f"{q['before']:.2f}", f"{q['after_mean']:.2f} ± {q['after_std']:.2f}",
                 *_cells(r, "samples_to_threshold", "mean_samples", "ratio_to_archer", "reached", archer),
                 *_cells(r, "samples_held", "mean_held", "held_ratio_to_archer", "held", archer),
                 f"{r['total_samples']:.0f}", f"{q['wall_s']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "sample_efficiency")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once (2 fills a 2-core CPU best)")
    parser.add_argument("--reuse-learning", action="store_true",
                        help="ArCHer, filtered BC and CHAI from benchmarks/results/learning.json, not trained again "
                             "(each one that has no finished run in --workdir)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="eval return to reach (default: halfway from the SFT start to ArCHer's final mean)")
    parser.add_argument("--finished-only", action="store_true",
                        help="train nothing: aggregate the runs of --workdir that have finished (seeds per method may differ)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    start = time.perf_counter()
    previous = json.loads((RESULTS / "learning.json").read_text()) if args.reuse_learning else None
    workdir = args.workdir.resolve()
    done = {(m, s): finished(m, s, workdir) for m in args.methods for s in args.seeds}
    # A method is taken from learning.json only when none of its runs here has finished: seeds of one
    # method never mix two sources.
    here = {m for (m, _), summary in done.items() if summary is not None}
    reuse = [(m, s) for m in args.methods for s in args.seeds if previous is not None and m in REUSABLE - here]
    jobs = [(m, s) for s in args.seeds for m in args.methods if (m, s) not in reuse]
    if args.finished_only:
        summaries = [reused(m, s, previous) for m, s in reuse] + [done[j] for j in jobs if done[j] is not None]
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(train, m, s, workdir) for m, s in jobs]
            summaries = [reused(m, s, previous) for m, s in reuse] + [f.result() for f in futures]
    order = {m: i for i, m in enumerate(METHODS)}
    summaries.sort(key=lambda s: (order[s["method"]], s["config"]["seed"]))
    quality = learning.aggregate(summaries)
    threshold = args.threshold
    if threshold is None:
        archer = [s for s in summaries if s["method"] == "archer"]
        if not archer:
            raise SystemExit("--threshold is needed without ArCHer's runs")
        start_return = statistics.mean(s["eval_return_before"] for s in archer)
        threshold = start_return + 0.5 * (statistics.mean(s["eval_return_after"] for s in archer) - start_return)
    rows = efficiency(summaries, threshold)
    curve = learning.curves(summaries)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = sorted({q["seeds"] for q in quality})
    seeds = f"{counts[0]} seeds" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} seeds per method"
    learning.plot(curve, args.out / "sample_efficiency.png",
                  f"20Q, tiny preset: mean of {seeds}, band min..max", threshold)
    text = table(rows, quality, threshold)
    (args.out / "sample_efficiency.md").write_text(text + "\n")
    result = dict(benchmark="sample_efficiency", machine=machine(), threshold=threshold,
                  config=dict(vars(args), workdir=str(args.workdir), out=str(args.out)),
                  seconds=time.perf_counter() - start, rows=rows, quality=quality, curves=curve,
                  runs=[{k: s.get(k) for k in ("method", "agent", "env_samples", "evals", "wall_time_s", "benchmark_wall_s",
                                               "reused_from")} | dict(seed=s["config"]["seed"]) for s in summaries])
    (args.out / "sample_efficiency.json").write_text(json.dumps(portable(result), indent=2) + "\n")
    print(text)
    print(f"wrote {args.out / 'sample_efficiency.json'}, .png, .md ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
