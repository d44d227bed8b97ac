"""Evaluates a trained run's checkpoint: more games, other seeds, greedy or sampled; prints dialogues.

    python -m archer_jax.evaluate --workdir=runs/20q_tiny                        # the newest checkpoint, greedy
    python -m archer_jax.evaluate --workdir=runs/20q_tiny --episodes=256 --sampled --seed=1
    python -m archer_jax.evaluate --workdir=runs/20q_tiny --checkpoint=20 --dialogues=3
    python -m archer_jax.evaluate --workdir=runs/20q_tiny --export_policy=exported/20q_tiny

It prints one line (the checkpoint, the games, their mean return, success, invalid turns and
length), ``--dialogues`` of the games played in full, and writes a JSON with the metrics and every
dialogue (``--json``; by default ``<workdir>/evaluations/checkpoint_<N>_<greedy|sampled>_seed<S>.json``).
Seed 0 plays the run's own evaluation games, so ``--episodes`` equal to the run's ``eval_size``
gives its logged greedy evaluation of that checkpoint again. ``--export_policy`` also writes the
checkpoint's policy as a Hugging Face directory. Errors are one line; a run still training in the
workdir is not disturbed (nothing but the JSON is written there).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

from archer_jax import rollout
from archer_jax.envs.base import EnvError
from archer_jax.errors import ConfigError, TrainingError
from archer_jax.models.hub import ModelLoadError
from archer_jax.rollout import dialogue_text
from archer_jax.trained import TrainedRun, game_seeds

log = logging.getLogger("archer_jax")


def evaluate(run: TrainedRun | str | Path, *, checkpoint: int | None = None, episodes: int = 64, seed: int = 0,
             sampled: bool = False, export_policy: str | Path | None = None) -> dict[str, Any]:
    """The evaluation's record: its settings, the metrics of :func:`archer_jax.rollout.summarize`,
    and every dialogue played (observations, actions, rewards, how it ended). ``run``: a loaded
    :class:`TrainedRun` (``checkpoint`` is then its own), or a workdir to load it from."""
    if not isinstance(run, TrainedRun):
        with TrainedRun.load(run, checkpoint) as loaded:
            return evaluate(loaded, episodes=episodes, seed=seed, sampled=sampled, export_policy=export_policy)
    episodes_played = run.play(episodes, seed=seed, sampled=sampled)
    exported = str(run.export_policy(export_policy)) if export_policy else None
    return dict(
        workdir=str(run.workdir), checkpoint=run.checkpoint, agent=run.config.agent, env=run.config.env.name,
        episodes=episodes, seed=seed, mode="sampled" if sampled else "greedy",
        metrics=rollout.summarize(episodes_played), exported_policy=exported,
        dialogues=[dict(seed=s, observations=e.observations, actions=e.actions, rewards=e.rewards,
                        success=e.success, truncated=e.truncated, invalid=e.invalid, text=dialogue_text(e))
                   for s, e in zip(game_seeds(episodes, seed), episodes_played)],
    )


def summary_line(record: dict[str, Any]) -> str:
    m = record["metrics"]
    return (f"checkpoint {record['checkpoint']} of {record['workdir']} ({record['agent']} on {record['env']}): "
            f"{record['episodes']} {record['mode']} games, seed {record['seed']}: return {m['return']:.3f}, "
            f"success {m['success']:.2f}, invalid turns {m['invalid']:.2f}, length {m['length']:.2f}")


def default_json(record: dict[str, Any]) -> Path:
    return (Path(record["workdir"]) / "evaluations"
            / f"checkpoint_{record['checkpoint']}_{record['mode']}_seed{record['seed']}.json")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the run's directory (python -m archer_jax.train --workdir)")
    parser.add_argument("--checkpoint", type=_non_negative, default=None, help="its iteration (default: the newest)")
    parser.add_argument("--episodes", type=_positive, default=64, help="games to play (default %(default)s)")
    parser.add_argument("--seed", type=_non_negative, default=0,
                        help="0: the run's own evaluation games; another: other games (default %(default)s)")
    parser.add_argument("--sampled", action="store_true", help="sample at the run's settings instead of greedy")
    parser.add_argument("--dialogues", type=_non_negative, default=0, help="print this many of the games in full")
    parser.add_argument("--json", default=None, help="where to write the record (default: <workdir>/evaluations/...)")
    parser.add_argument("--export_policy", default=None, help="also write the policy as a Hugging Face directory here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)
    if args.json and Path(args.json).expanduser().is_dir():
        print(f"error: --json: {args.json} is a directory; give a file path", file=sys.stderr)
        return 2
    try:
        record = evaluate(args.workdir, checkpoint=args.checkpoint, episodes=args.episodes, seed=args.seed,
                          sampled=args.sampled, export_policy=args.export_policy)
        path = Path(args.json).expanduser() if args.json else default_json(record)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
    except (ConfigError, ModelLoadError, TrainingError, EnvError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for dialogue in record["dialogues"][: args.dialogues]:
        print(f"\n== game {dialogue['seed']} ==\n{dialogue['text']}")
    print(summary_line(record) + f"; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
