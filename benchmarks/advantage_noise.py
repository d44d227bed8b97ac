"""Does ArCHer's actor move on its advantage's signal or on its noise? The same run with the
advantage taken from another row of the batch: each row's advantage is its neighbour's (the same
values, the same mean and spread, no relation to the row's own a_π), so whatever the actor does
then is what noise of that size does under Adam.

    python benchmarks/advantage_noise.py --workdir runs/advantage_noise -- --config.critic_steps=40 ...

Registers the actor loss ``actor_pg_shuffled`` (``actor_pg`` on ``roll(A, 1)``) and trains
``configs/20q.py:weak`` with it in this process, with the overrides after ``--``; then writes
``results/advantage_noise.json``: the run's per-iteration diagnostics beside those of the run with
the real advantage given by ``--compare`` (a run directory with the same overrides), as
``benchmarks/learning_hard.py`` keeps them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import jax.numpy as jnp

from common import RESULTS, machine, portable

ROOT = Path(__file__).resolve().parent.parent
DIAGNOSTICS = {  # name: history.jsonl key (benchmarks/learning_hard.py's)
    "eval_return": "eval/return", "return": "rollout/return", "invalid": "rollout/invalid",
    "q1_std": "critic/q1/std", "advantage_mean": "actor/advantage/mean", "advantage_std": "actor/advantage/std",
    "action_logprob": "actor/action_logprob/mean", "action_tokens": "actor/action_tokens/mean",
}


def register() -> None:
    """``actor_pg_shuffled``: ArCHer's policy gradient with each row's advantage its neighbour's."""
    from archer_jax.learners import actor_losses, losses

    if "actor_pg_shuffled" not in actor_losses.ACTOR_LOSSES:
        actor_losses.register("actor_pg_shuffled",
                              lambda t: losses.actor_pg_loss(jnp.roll(t.advantage, 1), t.token_logprobs, t.mask))


def diagnostics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines() if line.strip()]
    return [dict(iteration=h["iteration"], **{k: h[v] for k, v in DIAGNOSTICS.items() if v in h}) for h in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--compare", type=Path, help="the run with the real advantage and the same overrides")
    parser.add_argument("--out", type=Path, default=RESULTS / "advantage_noise.json")
    parser.add_argument("overrides", nargs="*", help="--config.key=value flags for the run (after --)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    register()
    if not (args.workdir / "summary.json").is_file() or json.loads((args.workdir / "summary.json").read_text()).get("stopped"):
        from archer_jax.run import cli

        sys.argv = ["archer_jax.train", "--config=configs/20q.py:weak", f"--workdir={args.workdir}",
                    "--config.learner.actor_loss=actor_pg_shuffled", *args.overrides]
        os.chdir(ROOT)
        try:
            cli.run()
        except SystemExit as stop:
            if stop.code:
                raise
    result = dict(benchmark="advantage_noise", machine=machine(), overrides=args.overrides,
                  shuffled=diagnostics(args.workdir),
                  real=diagnostics(args.compare) if args.compare else None)
    args.out.write_text(json.dumps(portable(result), indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
