"""The README's "Will it fit?" table: ``python -m archer_jax.plan`` for the paper's configs on TPU
slices, compiled on this machine (no TPU), one JSON per config and slice.

    python tpu_plan.py                 # every pair below that has no result yet (resumes)
    python tpu_plan.py --only 20q:v5litepod-8 --force
    python tpu_plan.py --table         # the markdown table from the results, for the README

Each plan is a subprocess of the plan command itself (its ``--json``), so the figures are the
command's. Writes results/tpu_plan_<config>_<target>.json, with the machine that compiled them,
the wall time of the whole plan and each program's compile time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAIRS = [("20q", "v5litepod-8"), ("20q", "v4-8"), ("20q_llm", "v5litepod-8"), ("20q_llm", "v4-32"),
         ("20q_ppo", "v5litepod-8")]
GiB = 2**30


def result_path(config: str, target: str) -> Path:
    return RESULTS / f"tpu_plan_{config}_{target}.json"


def plan(config: str, target: str) -> dict:
    """Runs the plan command for ``configs/<config>.py`` on ``target``; its JSON with provenance."""
    import platform

    import jax

    out = result_path(config, target)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "archer_jax.plan", f"--config=configs/{config}.py",
                           f"--target={target}", f"--json={out}.tmp"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - start
    if not Path(f"{out}.tmp").exists():
        raise SystemExit(f"the plan of {config} on {target} failed:\n{done.stderr[-3000:]}")
    result = json.loads(Path(f"{out}.tmp").read_text())
    Path(f"{out}.tmp").unlink()
    result.update(command=f"python -m archer_jax.plan --config=configs/{config}.py --target={target}",
                  exit_status=done.returncode, wall_s=round(wall, 1),
                  machine=dict(cpu_count=os.cpu_count(), platform=platform.platform(), jax=jax.__version__,
                               libtpu=_version("libtpu"), date=time.strftime("%Y-%m-%d")),
                  stdout=done.stdout)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def markdown(results: list[dict]) -> str:
    """One row per config and slice: fits, the largest peak per chip, the planned iteration."""
    lines = ["| config | slice | fits | largest peak per chip (program) | HBM per chip | planned iteration "
             "(roofline) | bound by | compile (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        programs = r["programs"]
        top = max(programs, key=lambda p: p["peak_bytes"])
        fits = "yes" if all(p["fits"] for p in programs) else "**no**"
        iteration = f"{r['iteration_s']:.2f} s" if r.get("iteration_s") is not None else "-"
        compile_s = sum(p["compile_s"] for p in programs)
        lines.append(f"| {r['command'].split('configs/')[1].split(' ')[0]} | {r['target']} ({r['devices']} chips, "
                     f"{r['hosts']} host{'s' if r['hosts'] > 1 else ''}) | {fits} | {top['peak_bytes'] / GiB:.2f} GiB "
                     f"({top['name']}) | {r['hbm_bytes'] / GiB:.0f} GiB | {iteration} | {r.get('bound_by') or '-'} | "
                     f"{compile_s:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="config:target[,config:target...] (default: all)")
    parser.add_argument("--force", action="store_true", help="plan again where a result exists")
    parser.add_argument("--table", action="store_true", help="print the README table from the results and stop")
    args = parser.parse_args()
    pairs = [tuple(p.split(":")) for p in args.only.split(",")] if args.only else PAIRS
    if args.table:
        print(markdown([json.loads(result_path(c, t).read_text()) for c, t in pairs if result_path(c, t).exists()]))
        return
    for config, target in pairs:
        if result_path(config, target).exists() and not args.force:
            print(f"{config} on {target}: done ({result_path(config, target).name})")
            continue
        result = plan(config, target)
        print(result["stdout"])
        print(f"{config} on {target}: exit {result['exit_status']}, {result['wall_s']} s")


if __name__ == "__main__":
    main()
