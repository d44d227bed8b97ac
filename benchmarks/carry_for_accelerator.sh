#!/usr/bin/env bash
# Copies the pure-Python packages that the accelerator campaign needs and a bare accelerator image
# (jax, flax, optax, orbax-checkpoint, torch, transformers; no network, no pip) may lack, from
# this machine's Python environment into <repo>/.carry/ (ignored by git).
#
#   bash benchmarks/carry_for_accelerator.sh            # uses `python` (e.g. the activated dev venv)
#   PYTHON=/path/to/python bash benchmarks/carry_for_accelerator.sh
#
# Then send .carry with the tree and put it on the path there (the campaign adds it to its stages'
# PYTHONPATH itself when the folder exists):
#
#   PYTHONPATH=$PWD:$PWD/.carry python benchmarks/accelerator.py --out $OUT
#
# (on a lent device machine: the run tool with carry=[".carry"]).
#
# What travels: pytest and its own dependencies (the parity stage), ml_collections (the train
# app's config flags), peft and accelerate (llm_7b's PyTorch reference; the campaign drops the
# reference when they do not import there, e.g. for want of psutil). Packages the image's own
# libraries already depend on (absl, yaml, pygments, packaging, tqdm, numpy) are left out, so that
# nothing shadows the image's copies; so are compiled extensions (*.so), which need not match the
# remote Python. matplotlib (compiled) cannot travel: without it the train run stops after its
# last iteration, when it draws learning_curve.png; its per-iteration times are kept regardless.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
PACKAGES="pytest _pytest pluggy iniconfig py ml_collections peft accelerate"
rm -rf .carry && mkdir -p .carry
"$PYTHON" - "$PACKAGES" <<'EOF'
import importlib.util, pathlib, shutil, sys
import importlib.metadata as md

dest = pathlib.Path(".carry")
ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.pyc", "tests")
for name in sys.argv[1].split():
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        print(f"skipped {name}: not installed here")
        continue
    origin = pathlib.Path(spec.origin)
    if origin.name == "__init__.py":
        shutil.copytree(origin.parent, dest / name, ignore=ignore)
    else:
        shutil.copy(origin, dest / origin.name)
    for dist in md.packages_distributions().get(name, []):  # metadata too: versions, pytest's entry points
        info = md.distribution(dist)._path  # noqa: SLF001 (the .dist-info folder)
        if not (dest / info.name).exists():
            shutil.copytree(info, dest / info.name, ignore=ignore)
    print(f"carried {name}")
EOF
size=$(du -sm .carry | cut -f1)
echo ".carry: ${size} MiB"
if [ "$size" -gt 40 ]; then echo "error: .carry is over 40 MiB" >&2; exit 1; fi
