"""Offline dialogues played by the scripted experts in the embedded envs, in the official file formats.

    python -m archer_jax.data.generate --env=20q --episodes=1000 \\
        --policy_mix=optimal:0.2,redundant:0.3,random:0.5 --out=data/20q/train.json [--seed=0] [--max_turns=20]

``--env``: ``20q`` (157 objects), ``20q_subset`` (10 objects) or ``city``; 20Q games are written in
the LMRL-Gym format, city games in the official Guess My City format (:mod:`archer_jax.data.dialogues`).
Each episode draws its expert kind from the mix (weights normalised; kinds of
:data:`archer_jax.envs.experts.EXPERTS`) and its secret uniformly, with one RNG seeded by ``--seed``:
the same arguments write the same file. Each game also records its ``"expert"`` kind (the readers
keep extra fields; LMRL-Gym's and ArCHer's loaders ignore them).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from archer_jax.data.dialogues import write_city_dialogues, write_lmrl_20q
from archer_jax.envs import experts
from archer_jax.envs import guess_my_city as gmc
from archer_jax.envs import twenty_questions as tq
from archer_jax.envs.oracle import NO, YES
from archer_jax.envs.question_game import MAX_TURNS, QuestionGame

WRITERS: dict[str, Callable[[Path, Sequence[dict]], Path]] = {
    "20q": write_lmrl_20q, "20q_subset": write_lmrl_20q, "city": write_city_dialogues,
}
ENVS = tuple(WRITERS)


@dataclasses.dataclass(frozen=True)
class _Game:
    """How to play and record one env: the game, its secrets, an expert of a kind, the file record."""

    game: QuestionGame
    secrets: tuple[str, ...]
    expert: Callable[[str], experts.ScriptedExpert]
    record: Callable[[str, list[str], bool], dict[str, Any]]


def _lmrl_record(secret: str, lines: list[str], won: bool) -> dict[str, Any]:
    for line in lines:
        if not line.endswith((" " + YES, " " + NO)):
            raise RuntimeError(f"20q: the expert's question got an answer the LMRL-Gym format cannot hold: {line!r}")
    return {"lines": lines, "correct": won, "word": list(tq.object_named(secret).names)}


def _city_record(secret: str, lines: list[str], won: bool) -> dict[str, Any]:
    return {"conversation": lines, "done": won, "word": secret.lower().replace(", ", ",")}


def _game(env: str, max_turns: int) -> _Game:
    if env == "20q":
        return _Game(tq.TwentyQuestions(max_turns=max_turns), tuple(o.name for o in tq.objects()),
                     lambda kind: experts.expert(kind), _lmrl_record)
    if env == "20q_subset":
        return _Game(tq.TwentyQuestionsSubset(max_turns=max_turns), tq.SUBSET,
                     lambda kind: experts.expert(kind, universe=tq.SUBSET), _lmrl_record)
    if env == "city":
        return _Game(gmc.GuessMyCity(max_turns=max_turns), tuple(c.name for c in gmc.cities()),
                     lambda kind: experts.city_expert(kind), _city_record)
    raise ValueError(f"--env: unknown env {env!r}; known: {', '.join(ENVS)}")


def parse_policy_mix(mix: str | Mapping[str, float]) -> dict[str, float]:
    """``"optimal:0.2,random:0.8"`` (or a dict) as normalised weights; a ValueError naming a bad kind or weight."""
    if isinstance(mix, str):
        pairs = []
        for item in (i.strip() for i in mix.split(",") if i.strip()):
            kind, sep, weight = item.partition(":")
            if not sep:
                raise ValueError(f"--policy_mix: {item!r} is not kind:weight")
            pairs.append((kind.strip(), weight.strip()))
    else:
        pairs = list(mix.items())
    weights: dict[str, float] = {}
    for kind, weight in pairs:
        if kind not in experts.EXPERTS:
            raise ValueError(f"--policy_mix: unknown expert kind {kind!r}; known: {', '.join(experts.EXPERTS)}")
        if kind in weights:
            raise ValueError(f"--policy_mix: expert kind {kind!r} given twice")
        try:
            value = float(weight)
        except (TypeError, ValueError):
            raise ValueError(f"--policy_mix: expert kind {kind!r} has weight {weight!r}, not a number") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"--policy_mix: expert kind {kind!r} has weight {weight!r}; weights are finite and >= 0")
        weights[kind] = value
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"--policy_mix: {mix!r} gives no expert kind a positive weight")
    return {kind: w / total for kind, w in weights.items() if w > 0}


def play(game: QuestionGame, expert: experts.ScriptedExpert, **reset: str) -> tuple[list[str], bool]:
    """One episode of ``expert`` in ``game`` (``reset``: the secret's keyword); ``(lines, won)``."""
    observation = game.reset(**reset)
    while True:
        result = game.step(expert.act(observation))
        observation = result.observation
        if result.done:
            return observation.split("\n")[1:-1], result.info.success


def generate(
    env: str, episodes: int, policy_mix: str | Mapping[str, float], seed: int = 0, max_turns: int = MAX_TURNS
) -> list[dict[str, Any]]:
    """``episodes`` games of the experts of ``policy_mix`` in ``env``, in the env's file format."""
    if episodes < 1:
        raise ValueError(f"--episodes: must be >= 1 (a dataset of no dialogues trains nothing), got {episodes}")
    if max_turns < 1:
        raise ValueError(f"--max_turns: {max_turns} is not positive")
    weights = parse_policy_mix(policy_mix)
    spec = _game(env, max_turns)
    kinds = list(weights)
    players: dict[str, experts.ScriptedExpert] = {}
    secret_key = "city" if env == "city" else "word"
    rng = random.Random(seed)
    games = []
    for _ in range(episodes):
        kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
        secret = rng.choice(spec.secrets)
        if kind not in players:
            players[kind] = spec.expert(kind)
        player = players[kind]
        player.rng = random.Random(rng.getrandbits(64))  # each episode's faults from the one seeded RNG
        lines, won = play(spec.game, player, **{secret_key: secret})
        games.append({**spec.record(secret, lines, won), "expert": kind})
    return games


def write(env: str, games: Sequence[dict], path: str | Path) -> Path:
    """Writes ``games`` of ``env`` to ``path`` in the env's file format."""
    if env not in WRITERS:
        raise ValueError(f"--env: unknown env {env!r}; known: {', '.join(ENVS)}")
    return WRITERS[env](Path(path), games)


def summary(env: str, games: Sequence[dict]) -> str:
    """Episodes, success rate and mean return per expert kind, on one line."""
    lines_key, won_key = ("conversation", "done") if env == "city" else ("lines", "correct")
    parts = []
    for kind in sorted({g["expert"] for g in games}):
        mine = [g for g in games if g["expert"] == kind]
        success = sum(g[won_key] for g in mine) / len(mine)
        mean_return = sum(-(len(g[lines_key]) - g[won_key]) for g in mine) / len(mine)
        parts.append(f"{kind}: {len(mine)} episodes, success {success:.2f}, mean return {mean_return:.2f}")
    return f"{len(games)} {env} episodes; " + "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m archer_jax.data.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True, choices=ENVS)
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--policy_mix", default="optimal:1", help="kind:weight,... (kinds of archer_jax.envs.experts.EXPERTS)")
    parser.add_argument("--out", required=True, help="the .json file to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_turns", type=int, default=MAX_TURNS)
    args = parser.parse_args(argv)
    try:
        games = generate(args.env, args.episodes, args.policy_mix, args.seed, args.max_turns)
        path = write(args.env, games, args.out)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{summary(args.env, games)} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
