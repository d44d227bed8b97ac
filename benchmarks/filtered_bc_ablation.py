"""Which dialogues pull filtered BC's greedy policy below its warm start: BC from one run's SFT
checkpoint on chosen subsets of the dialogues that run collected, then the greedy evaluation.

Every subset starts from the same parameters (the run's checkpoint 0, right after SFT, with a fresh
Adam) and takes ``--steps`` BC steps at the run's ``learner.actor_lr`` on uniform batches of its
transitions, as :mod:`archer_jax.agents.filtered_bc` does; the subsets are what the filter keeps
(the top ``filtered_bc_fraction`` by return), the won dialogues split by how many objects the
answers had left when the winning guess was asked (``filtered_bc_data.py``), and everything.

    python benchmarks/filtered_bc_ablation.py runs/fbc/seed1 --steps 50 [--sft_workdir runs/fbc/sft]

A finished run keeps only its last ``keep_checkpoints`` checkpoints; when checkpoint 0 is gone,
``--sft_workdir`` names a run of the same config whose checkpoint 0 is kept (the warm start is
seeded by ``sft.seed``, so it is the same): e.g. the same command with ``--config.iterations=1
--config.keep_checkpoints=5``.

Prints a table and writes ``results/filtered_bc_ablation.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from common import RESULTS, machine, portable
from filtered_bc_data import dialogues, latest_buffer

from archer_jax.config import validate
from archer_jax import rollout
from archer_jax.records.checkpoint import Checkpoints
from archer_jax.train import build_agent
from archer_jax.learners.selection import filtered_bc_mask
from archer_jax.learners.train_state import States
from archer_jax.records.checkpoint import Checkpoints


def subsets(records: list[dict], fraction: float) -> dict[str, list[int]]:
    """Episode numbers of each subset of the run's dialogues."""
    keep = filtered_bc_mask(np.array([r["ret"] for r in records]), fraction)
    wins = [r for r in records if r["won"]]
    return {
        "none (the SFT policy)": [],
        f"top {fraction:.0%} by return (filtered BC)": [r["episode"] for r, k in zip(records, keep) if k],
        "wins, 1-2 objects left at the guess": [r["episode"] for r in wins if r["left_at_win"] <= 2],
        "wins, 3+ objects left at the guess": [r["episode"] for r in wins if r["left_at_win"] > 2],
        "all wins": [r["episode"] for r in wins],
        "all dialogues": [r["episode"] for r in records],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path, help="a finished filtered-BC run of configs/20q.py:tiny")
    parser.add_argument("--steps", type=int, default=50, help="BC steps per subset (the tiny preset: 10 per iteration)")
    parser.add_argument("--sft_workdir", type=Path, default=None,
                        help="a run of the same config that kept checkpoint 0 (default: the workdir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    start = time.perf_counter()

    config = ml_collections.ConfigDict(json.loads((args.workdir / "config.json").read_text()))
    agent = build_agent(validate(config), args.workdir)  # the run's filtered-BC agent on its parts
    run = agent.parts
    fresh = agent.init_states()
    sft_actor, *_ = Checkpoints((args.sft_workdir or args.workdir) / "checkpoints").restore(0, actor=fresh.actor, critic=fresh.critic)
    buffer = latest_buffer(args.workdir)
    records = dialogues(buffer)
    episode_of = buffer.columns["episode"][: len(buffer)]
    rows = []
    try:
        for name, episodes in subsets(records, config.filtered_bc_fraction).items():
            actor = jax.tree.map(jnp.copy, sft_actor)  # the learner donates its state
            positions = np.flatnonzero(np.isin(episode_of, episodes))
            buffer.rng = np.random.default_rng(0)  # the same draws for every subset of equal size
            for _ in range(args.steps if len(positions) else 0):
                sample = buffer.sample_from(positions, run.batch)
                actor, _ = agent.bc_step(actor, run.pipeline.policy_batch(sample))
            evaluated = rollout.summarize(rollout.evaluate(run, agent.act, States(actor, fresh.critic)))
            rows.append(dict(subset=name, dialogues=len(episodes), transitions=int(len(positions)),
                             eval_return=evaluated["return"], eval_success=evaluated["success"]))
            print(f"{name:42s} {len(episodes):4d} dialogues {len(positions):5d} transitions | "
                  f"eval return {evaluated['return']:6.2f} | success {evaluated['success']:.2f}", flush=True)
    finally:
        run.close()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "filtered_bc_ablation.json"
    result = dict(benchmark="filtered_bc_ablation", machine=machine(), config=dict(workdir=str(args.workdir), sft_workdir=str(args.sft_workdir),
                  steps=args.steps, seed=config.seed), seconds=time.perf_counter() - start, rows=rows)
    path.write_text(json.dumps(portable(result), indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
