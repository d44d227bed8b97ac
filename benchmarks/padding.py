"""How much of a learner batch is padding: real replay batches as the run pads them today.

Reads a run's replay buffer from its latest checkpoint (``--workdir``, a run of the train app),
draws ``--batches`` batches of the run's ``batch_size`` transitions the way a critic step does
(uniform, with replacement, the buffer's own generator), pads them with the run's own input
pipeline (each field to the power-of-two bucket of its batch's longest row: ``learners.batches``),
and reports the fraction of token positions that are padding, per padded array, beside the
fraction left if each batch were padded only to its own longest row (the best any bucketing of
whole rows can do), and the fraction left when each critic step's sequences are packed several to
a row as the run packs them (``learners.packed_batches``: the online critic's s and a, the target
critic's s, s' and a_π, in rows of the step's longest's bucket, the row counts on their ladder;
the replay's own utterances stand in for a_π, which the policy samples alike).
With ``--workload paper`` it does the same for the iteration benchmark's paper workload at the
real length distribution (:func:`workload.transition_lengths`) instead of a run's replay.

    python benchmarks/padding.py --workdir runs/20q_tiny
    python benchmarks/padding.py --workload paper
Writes benchmarks/results/padding_<name>.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from archer_jax.learners.batches import MIN_BUCKET
from archer_jax.learners.packed_batches import packed_groups, row_length
from archer_jax.models.tokenizer import bucket_length
from archer_jax.records.checkpoint import Checkpoints, ReplayHandler
from common import RESULTS, write_result

# The fields a learner batch pads, each as one padded array: s and s' share one bucket
# (learners.batches.pad_pair), the policy's observation is the actor batch's.
FIELDS = {"critic s and s'": ("critic_observation", "critic_next_observation"), "critic a": ("critic_action",),
          "policy s": ("policy_observation",)}


def fractions(lengths: list[np.ndarray], max_length: int, min_bucket: int = MIN_BUCKET) -> dict[str, float]:
    """Padding fractions of batches with these row lengths (each array the rows padded together):
    padded to their power-of-two bucket as today, and padded only to their longest row."""
    lengths = [np.minimum(n, max_length) for n in lengths]  # rows are truncated to the limit
    real = sum(int(n.sum()) for n in lengths)
    bucketed = sum(len(n) * bucket_length(int(n.max()), max_length, min(min_bucket, max_length)) for n in lengths)
    longest = sum(len(n) * int(min(n.max(), max_length)) for n in lengths)
    return dict(bucketed=1 - real / bucketed, to_longest=1 - real / longest,
                mean_tokens=real / sum(len(n) for n in lengths),
                mean_bucket=bucketed / sum(len(n) for n in lengths))


def packed_fraction(steps: list[tuple[np.ndarray, np.ndarray]], max_length: int) -> float:
    """The padding fraction of critic steps' sequences packed as the run packs them: per step the
    online critic's (s, a) lengths and the target's (s, s', a_π), in one group, at one row length."""
    real = total = 0
    for sets in steps:
        groups = [[[np.ones(int(n), np.int32) for n in np.minimum(lengths, max_length)]] for lengths in sets]
        length = row_length([g[0] for g in groups], max_length)
        for group in groups:
            packed = packed_groups(group, 0, max_length=max_length, length=length)
            real += int((packed.segments > 0).sum())
            total += packed.segments.size
    return 1 - real / total


def critic_sets(lengths: dict[str, list[np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per critic step, the lengths the online critic's pack holds (s, a) and the target's (s, s', a_π)."""
    out = []
    for both, act in zip(lengths["critic s and s'"], lengths["critic a"]):
        s, s_next = np.split(both, 2)
        out.append((np.concatenate([s, act]), np.concatenate([s, s_next, act])))
    return out


def replay_lengths(workdir: Path, batches: int) -> tuple[dict[str, list[np.ndarray]], dict]:
    """Per field, the row lengths of ``batches`` critic-step samples of the run's latest replay."""
    config = json.loads((workdir / "config.json").read_text())
    checkpoints = Checkpoints(workdir / "checkpoints")
    step = checkpoints.latest()
    if step is None:
        raise SystemExit(f"{workdir}: no checkpoint to read a replay buffer from")
    replay = ReplayHandler().restore(workdir / "checkpoints" / str(step) / "replay")
    out: dict[str, list[np.ndarray]] = {f: [] for f in FIELDS}
    for _ in range(batches):
        sample = replay.sample(config["batch_size"])
        for f, columns in FIELDS.items():
            out[f].append(np.array([len(row) for c in columns for row in sample[c]]))
    return out, dict(workdir=str(workdir), checkpoint=step, transitions=replay.size, batch_size=config["batch_size"],
                     max_critic_length=config["model"]["max_critic_length"],
                     max_prompt_length=config["model"]["max_prompt_length"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--workdir", type=Path, help="a run of the train app with a checkpoint")
    source.add_argument("--workload", choices=("paper",), help="the iteration benchmark's workload at real lengths")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--name", default="", help="the result's name (default: the workdir's or the workload's)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    if args.workdir is not None:
        lengths, about = replay_lengths(args.workdir, args.batches)
        limits = {"critic s and s'": about["max_critic_length"], "critic a": about["max_critic_length"],
                  "policy s": about["max_prompt_length"]}
        name = args.name or args.workdir.name
    else:
        from workload import transition_lengths, workloads

        w = workloads()[args.workload]
        rng = np.random.default_rng(0)
        drawn = [transition_lengths(w, rng) for _ in range(args.batches)]
        # An utterance of the workload's turn growth (a question and its answer) in tokens: a and a_π.
        lengths = {"critic s and s'": [np.concatenate([d["observation"], d["next_observation"]]) for d in drawn],
                   "critic a": [np.full(w.transitions, w.turn_growth) for _ in drawn],
                   "policy s": [d["observation"] for d in drawn]}
        limit = w.policy.n_positions
        limits = dict.fromkeys(lengths, limit)
        about = dict(workload=w.name, batch_size=w.transitions, max_length=limit)
        name = args.name or f"workload_{args.workload}"
    rows = {f: fractions(lengths[f], limits[f], MIN_BUCKET) for f in lengths}
    if "critic a" in lengths:
        packed = packed_fraction(critic_sets(lengths), limits["critic a"])
        for f in ("critic s and s'", "critic a"):
            rows[f]["packed"] = packed
    print(f"{name}: {args.batches} batches of {about['batch_size']} transitions")
    print(f"{'array':16s} {'mean tokens':>11s} {'mean bucket':>11s} {'padding':>8s} {'to longest':>10s} {'packed':>7s}")
    for f, r in rows.items():
        packed = f"{r['packed']:7.1%}" if "packed" in r else f"{'-':>7s}"
        print(f"{f:16s} {r['mean_tokens']:11.1f} {r['mean_bucket']:11.1f} {r['bucketed']:8.1%} {r['to_longest']:10.1%} "
              f"{packed}")
    write_result(f"padding_{name}", dict(vars(args), **about), [dict(array=f, **r) for f, r in rows.items()], args.out)


if __name__ == "__main__":
    main()
