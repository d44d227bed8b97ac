"""Play a question game against a trained run's policy: it asks, you answer as the oracle.

    python -m archer_jax.play --workdir=runs/20q_tiny                  # the newest checkpoint
    python -m archer_jax.play --workdir=runs/20q_tiny --checkpoint=20 --sampled

You choose the secret (one of the env's objects or cities; it is only used to tell when the policy
has found it, by the env's own rule), then answer each question: ``y`` or ``yes`` for "Yes.", ``n``
or ``no`` for "No.", anything else as typed (Guess My City's answers are free text). An empty line
or end of input ends the game. The policy acts as it does in the run's evaluations: greedy (CHAI:
its choice among samples) unless ``--sampled``. Twenty Questions, its subset and Guess My City
have an oracle a person can stand in for; other envs are refused in one line (watch them with
``python -m archer_jax.evaluate --dialogues=N``). Nothing is written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

import jax

from archer_jax.envs import registry
from archer_jax.envs.base import EnvError
from archer_jax.envs.oracle import NO, YES
from archer_jax.envs.question_game import QuestionGame
from archer_jax.errors import ConfigError, TrainingError
from archer_jax.models.hub import ModelLoadError
from archer_jax.trained import TrainedRun

REPLIES = {"y": YES, "yes": YES, "yes.": YES, "n": NO, "no": NO, "no.": NO}


class GameOver(Exception):
    """The person ended the game (an empty line or end of input)."""


class PersonOracle:
    """An oracle that asks the person at the keyboard (``ask``: prompt -> their line)."""

    def __init__(self, ask: Callable[[str], str]):
        self.ask = ask

    def answer(self, secret: str, question: str) -> str:
        try:
            reply = self.ask(f"{question}\n  your answer (y / n / text): ").strip()
        except EOFError:
            raise GameOver from None
        if not reply:
            raise GameOver
        return REPLIES.get(reply.lower(), reply)


def secrets_of(env: QuestionGame) -> list[str]:
    """The names a person may choose the secret from (the env's objects or cities)."""
    pool = getattr(env, "objects", None) or getattr(env, "cities", None) or ()
    return [s.name for s in pool]


def play(run: TrainedRun, ask: Callable[[str], str], say: Callable[[str], None], *, sampled: bool = False,
         seed: int = 0) -> dict:
    """One game of ``run``'s env with the person as its oracle; returns how it ended."""
    c = run.config
    env = registry.env_factory(c.env, oracle=lambda: PersonOracle(ask))()
    if not isinstance(env, QuestionGame):
        raise ConfigError(f"config.env.name: {c.env.name} has no oracle a person can stand in for; watch its games "
                          f"with python -m archer_jax.evaluate --workdir={run.workdir} --dialogues=3")
    names = secrets_of(env)
    say(f"Think of one of these and type it (it only tells when the policy has found it): {', '.join(names)}")
    try:
        chosen = ask("your secret: ").strip()
    except EOFError:
        return dict(ended="quit", turns=0)
    match = next((n for n in names if n.lower() == chosen.lower()), None)
    if match is None:
        raise ConfigError(f"secret: {chosen!r} is not one of the env's {len(names)} (e.g. {names[0]!r})")
    observation = env.reset(**{env.secret_key: match})
    parts, key = run.agent.parts, jax.random.key(seed)
    for turn in range(1, c.env.max_turns + 1):
        utterance = run.agent.act(run.states, [observation], jax.random.fold_in(key, turn), not sampled, [0])[0]
        try:
            result = env.step(parts.pipeline.prompter.env_action(utterance))
        except GameOver:
            say(f"stopped after {turn - 1} questions")
            return dict(ended="quit", turns=turn - 1)
        observation = result.observation
        if result.done:
            ended = "found it" if result.info.success else "ran out of questions"
            say(f"the policy {ended} in {turn} questions (return {-(turn - 1) if result.info.success else -turn})")
            return dict(ended=ended, turns=turn, success=result.info.success)
    return dict(ended="ran out of questions", turns=c.env.max_turns, success=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the run's directory (python -m archer_jax.train --workdir)")
    parser.add_argument("--checkpoint", type=int, default=None, help="its iteration (default: the newest)")
    parser.add_argument("--sampled", action="store_true", help="sample the policy's questions instead of greedy")
    parser.add_argument("--seed", type=int, default=0, help="the sampling key's seed (with --sampled)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        with TrainedRun.load(args.workdir, args.checkpoint) as run:
            print(f"checkpoint {run.checkpoint} of {run.workdir}: {run.config.agent} on {run.config.env.name}")
            play(run, input, print, sampled=args.sampled, seed=args.seed)
    except (ConfigError, ModelLoadError, TrainingError, EnvError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
