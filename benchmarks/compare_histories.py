"""Whether two sets of runs logged the same history, bit for bit, in every non-time metric.

    python benchmarks/compare_histories.py BEFORE_DIR AFTER_DIR tiny ppo offline

Each name is a run directory under both ``BEFORE_DIR`` and ``AFTER_DIR``; their ``history.jsonl``
files are compared line by line, every key but ``time/*`` (NaN equals NaN). Exit status 0 when all
are identical. How a refactor shows it changed no result (benchmarks/README.md, "Refactors").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def differences(before: Path, after: Path) -> tuple[int, list[str]]:
    """(values compared, differences) of two history.jsonl files."""
    a = [json.loads(line) for line in before.read_text().splitlines()]
    b = [json.loads(line) for line in after.read_text().splitlines()]
    out = [f"{len(a)} lines vs {len(b)}"] if len(a) != len(b) else []
    compared = 0
    for i, (x, y) in enumerate(zip(a, b)):
        keys_x = {k for k in x if not k.startswith("time/")}
        keys_y = {k for k in y if not k.startswith("time/")}
        if keys_x != keys_y:
            out.append(f"line {i}: keys differ: {sorted(keys_x ^ keys_y)}")
        for k in sorted(keys_x & keys_y):
            compared += 1
            if x[k] != y[k] and not (x[k] != x[k] and y[k] != y[k]):
                out.append(f"line {i} {k}: {x[k]!r} vs {y[k]!r}")
    return compared, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    same = True
    for name in args.runs:
        compared, diffs = differences(args.before / name / "history.jsonl", args.after / name / "history.jsonl")
        print(f"{name}: {compared} values compared, {'identical' if not diffs else f'{len(diffs)} differences'}")
        for line in diffs[:10]:
            print("   ", line)
        same &= not diffs
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
