"""Which of the official Guess My City dialogues' questions the embedded city oracle answers.

The official dialogues (``guess_my_city.json``, 950 games) were played against the official
flan-t5 oracle, which answers free-form. The embedded oracle answers a yes/no grammar over the city
table (``archer_jax/envs/guess_my_city.py``). This counts, over every turn of the dataset, the
questions it parses (by kind: a guess, a yes/no attribute, a category value) and the ones it calls
invalid, with the commonest openings of those, so a user can see how far offline data in the
official style carries to online play against the embedded oracle.

    python benchmarks/city_questions.py --dataset ../shared/data/guess_my_city.json

The questions are the actions of the dataset's transitions as the offline runs read them
(:func:`archer_jax.data.dialogues.city_transitions`: a turn's text up to its first ``?`` on one
line, each game up to its first winning turn). Writes ``benchmarks/results/city_questions.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

from archer_jax.data.dialogues import city_transitions, read_city_dialogues
from archer_jax.envs.guess_my_city import CityOracle
from archer_jax.envs.oracle import canonical_question

RESULTS = Path(__file__).parent / "results"
YES_NO = re.compile(r"^(is|are|does|do|was|were|has|have|can|could|would|will|did)\b")


def count(dataset: Path, openings: int = 15) -> dict:
    """The parse counts of every question in ``dataset`` (official format)."""
    oracle = CityOracle()
    games = read_city_dialogues(dataset)
    kinds: collections.Counter = collections.Counter()
    invalid_openings: collections.Counter = collections.Counter()
    yes_no = 0
    for game in games:
        for transition in city_transitions(game):
            question = transition["action"]
            canonical = canonical_question(question)
            yes_no += bool(YES_NO.match(canonical))
            parsed = oracle.parse(question)
            if parsed is None:
                kinds["invalid"] += 1
                invalid_openings[" ".join(canonical.split()[:4])] += 1
            else:
                kinds[parsed[0]] += 1
    total = sum(kinds.values())
    return {
        "dataset": dataset.name, "games": len(games), "questions": total,
        "parsed": total - kinds["invalid"], "parsed_fraction": round((total - kinds["invalid"]) / total, 4),
        "by_kind": {"guess": kinds["guess"], "bool": kinds["bool"], "category": kinds["category"],
                    "number": kinds["number"], "invalid": kinds["invalid"]},
        "yes_no_shaped": yes_no, "yes_no_shaped_fraction": round(yes_no / total, 4),
        "commonest_invalid_openings": dict(invalid_openings.most_common(openings)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=Path("../shared/data/guess_my_city.json"))
    parser.add_argument("--out", type=Path, default=RESULTS / "city_questions.json")
    args = parser.parse_args()
    if not args.dataset.is_file():
        raise SystemExit(f"error: --dataset {args.dataset}: no such file (the official guess_my_city.json)")
    result = count(args.dataset)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "commonest_invalid_openings"}))


if __name__ == "__main__":
    main()
