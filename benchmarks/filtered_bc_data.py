"""What online filtered BC imitates: the trajectories its filter keeps, from a run's replay buffer.

For Twenty Questions runs (``twenty_questions_subset``, the tiny preset): every dialogue in the
latest checkpoint's buffer, grouped by the iterations the filter had seen, with what the top
``--fraction`` keeps. For each won dialogue it counts the objects still consistent with the
answers when the winning guess was asked (by the scripted expert's bookkeeping): 1 means the
answers had pinned the object down, k > 1 means the guess was a 1-in-k draw that happened to be
right. The optimal expert guesses only when 1 or 2 remain, so a win with 3 or more left is luck
it never counts on.

    python benchmarks/filtered_bc_data.py runs/learning/filtered_bc_seed1 [more run dirs]

Prints a table per run and writes ``results/filtered_bc_data.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from archer_jax.envs import experts, twenty_questions
from archer_jax.envs.oracle import ends_with_name
from archer_jax.learners.selection import filtered_bc_mask
from archer_jax.replay import ReplayBuffer

RESULTS = Path(__file__).parent / "results"


def latest_buffer(workdir: Path) -> ReplayBuffer:
    """The replay buffer of the run's latest checkpoint."""
    steps = sorted((int(p.name), p) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    if not steps:
        raise SystemExit(f"{workdir}: no checkpoint")
    return ReplayBuffer.restore(steps[-1][1] / "replay" / "process_0")


def dialogues(buffer: ReplayBuffer) -> list[dict]:
    """One record per dialogue: return, turns, success, guesses, objects left at the winning guess."""
    n = len(buffer)
    cols = {k: buffer.columns[k][:n] for k in ("episode", "episode_return", "observation", "action", "reward", "terminal")}
    expert = experts.expert("optimal", universe=twenty_questions.SUBSET)
    objects = [twenty_questions.object_named(name) for name in twenty_questions.SUBSET]
    out = []
    for number in np.unique(cols["episode"]):
        rows = np.flatnonzero(cols["episode"] == number)
        actions = [cols["action"][i] for i in rows]
        won = bool(cols["terminal"][rows[-1]]) and cols["reward"][rows[-1]] == 0.0
        guesses = sum(any(ends_with_name(a, o.names) for o in objects) for a in actions)
        left = len(expert.consistent(cols["observation"][rows[-1]])) if won else None
        out.append(dict(episode=int(number), ret=float(cols["episode_return"][rows[0]]), turns=len(rows), won=won,
                        guesses=guesses, left_at_win=left))
    return out


def describe(records: list[dict]) -> dict:
    """Mean return, success, turns, guesses; among wins the share won with 3 or more objects left."""
    wins = [r for r in records if r["won"]]
    lucky = [r for r in wins if r["left_at_win"] > 2]
    return dict(
        dialogues=len(records),
        mean_return=statistics.mean(r["ret"] for r in records),
        success=len(wins) / len(records),
        mean_turns=statistics.mean(r["turns"] for r in records),
        mean_guesses=statistics.mean(r["guesses"] for r in records),
        lucky_wins=len(lucky) / len(wins) if wins else None,
        mean_objects_left_at_win=statistics.mean(r["left_at_win"] for r in wins) if wins else None,
        returns=dict(sorted((str(int(v)), sum(r["ret"] == v for r in records)) for v in {r["ret"] for r in records})),
    )


def analyse(workdir: Path, rollout_size: int, fraction: float) -> dict:
    """The filter's choice after the first iteration and at the end of the run."""
    records = dialogues(latest_buffer(workdir))
    out = {}
    for name, seen in (("after iteration 1", records[:rollout_size]), ("end of run", records)):
        keep = filtered_bc_mask(np.array([r["ret"] for r in seen]), fraction)
        out[name] = dict(all=describe(seen), kept=describe([r for r, k in zip(seen, keep) if k]),
                         cutoff=min(r["ret"] for r, k in zip(seen, keep) if k))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdirs", nargs="+", type=Path)
    parser.add_argument("--rollout-size", type=int, default=32, help="dialogues per iteration (the tiny preset's 32)")
    parser.add_argument("--fraction", type=float, default=0.1, help="the filter's filtered_bc_fraction")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = {}
    for workdir in args.workdirs:
        result[workdir.name] = analyse(workdir, args.rollout_size, args.fraction)
        for when, r in result[workdir.name].items():
            print(f"{workdir.name}, {when}: cutoff {r['cutoff']:.0f}")
            for part in ("all", "kept"):
                d = r[part]
                print(f"  {part:5s} {d['dialogues']:4d} dialogues | return {d['mean_return']:6.2f} | success "
                      f"{d['success']:.2f} | turns {d['mean_turns']:5.2f} | guesses {d['mean_guesses']:4.2f} | "
                      f"wins with >= 3 objects left {d['lucky_wins'] or 0:.2f} (mean left {d['mean_objects_left_at_win'] or 0:.2f})")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "filtered_bc_data.json"
    path.write_text(json.dumps(dict(benchmark="filtered_bc_data", fraction=args.fraction, runs=result), indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
