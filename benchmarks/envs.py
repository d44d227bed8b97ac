"""Environment steps per second through the worker pool, at 0 (in-process), 1, 2 and 4 workers.

Each env of the batch gets one action per step; episodes are made long enough not to end
during the run (attribute questions only, a large turn limit), so the figure is pure stepping:
oracle, game and inter-process traffic. Detective runs when jericho and the game file exist.

    python benchmarks/envs.py --steps 50 --workers 0 1 2 4
Prints a table; writes benchmarks/results/envs.json.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import time
from pathlib import Path

from archer_jax.envs import detective, guess_my_city, twenty_questions
from archer_jax.envs.pool import EnvPool
from common import RESULTS, machine, print_table, write_result

GAME = Path(__file__).resolve().parents[2] / "shared" / "data" / "detective.z5"


def _cases(args) -> list[tuple[str, functools.partial, list[str], int]]:
    tq_questions = [a.question for a in twenty_questions.attributes()]
    city_questions = [a.question.replace("{value}", "Asia") for a in guess_my_city.attributes()]
    cases = [
        ("twenty_questions", functools.partial(twenty_questions.TwentyQuestions, max_turns=10**9), tq_questions, args.envs),
        ("twenty_questions_subset", functools.partial(twenty_questions.TwentyQuestionsSubset, max_turns=10**9),
         tq_questions, args.envs),
        ("guess_my_city", functools.partial(guess_my_city.GuessMyCity, max_turns=10**9), city_questions, args.envs),
    ]
    if importlib.util.find_spec("jericho") is not None and GAME.is_file():
        actions = ["look", "north", "south", "east", "west", "take paper", "read paper", "inventory"]
        cases.append(("detective", functools.partial(detective.Detective, GAME, max_steps=10**9), actions,
                      args.detective_envs))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--steps", type=int, default=50, help="batch steps per measurement")
    parser.add_argument("--envs", type=int, default=32, help="envs per batch (embedded games)")
    parser.add_argument("--detective-envs", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    rows = []
    for name, factory, actions, num_envs in _cases(args):
        steps = args.steps if name != "detective" else max(args.steps // 5, 4)
        for workers in args.workers:
            with EnvPool(factory, num_envs, num_workers=workers) as pool:
                pool.reset(range(num_envs))
                pool.step([actions[0]] * num_envs)  # warm up (imports, first answers)
                start = time.perf_counter()
                for t in range(steps):
                    results = pool.step([actions[(t + i) % len(actions)] for i in range(num_envs)])
                    finished = [i for i, r in enumerate(results) if r.done]
                    if finished:  # a question that happened to win: start that env again
                        pool.reset(finished, indices=finished)
                seconds = time.perf_counter() - start
            rows.append(dict(env=name, workers=workers, envs=num_envs, steps=steps * num_envs, seconds=seconds,
                             steps_per_s=steps * num_envs / seconds))
    info = machine()
    print(f"{info['cpu_count']} CPUs, {info['date']}: env steps per second through the pool (0 = in-process)")
    print_table(rows, [("env", "env", ""), ("workers", "workers", "d"), ("envs", "envs", "d"),
                       ("steps_per_s", "steps/s", ".0f")])
    path = write_result("envs", vars(args) | {"out": str(args.out)}, rows, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
