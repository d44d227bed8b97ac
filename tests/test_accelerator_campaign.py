"""benchmarks/accelerator.py: its dry run lists every stage, and a CPU-only machine is refused in one line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "accelerator.py"


def _campaign():
    spec = importlib.util.spec_from_file_location("accelerator_campaign", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_dry_run_lists_every_stage_and_runs_nothing(tmp_path):
    result = _run("--dry-run", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    for stage in _campaign().STAGES:
        assert f"\n{stage}:" in "\n" + result.stdout, stage
    assert "iteration.py --workload paper --dtype bfloat16" in result.stdout
    assert "llm_7b.py --scale full" in result.stdout and "archer_jax.train" in result.stdout
    assert not (tmp_path / "out").exists()


def test_a_subset_of_stages_in_the_campaigns_order(tmp_path):
    result = _run("--dry-run", "--stages", "parity,iteration", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.index("iteration:") < result.stdout.index("parity:") and "llm_7b:" not in result.stdout
    assert _run("--dry-run", "--stages", "nope").returncode != 0


def test_a_cpu_only_machine_is_refused_in_one_line(tmp_path):
    result = _run("--out", str(tmp_path / "out"))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--allow-cpu" in lines[0], result.stderr
    assert not (tmp_path / "out" / "accelerator_cpu.json").exists()


def test_device_tags_and_pytest_summaries():
    campaign = _campaign()
    assert campaign.device_tag("gpu", "NVIDIA H100 80GB HBM3") == "gpu_h100"
    assert campaign.device_tag("gpu", "NVIDIA H200") == "gpu_h200"
    assert campaign.device_tag("tpu", "TPU v5 lite") == "tpu_v5e"
    assert campaign.device_tag("tpu", "TPU v4") == "tpu_v4"
    assert campaign.device_tag("cpu", "cpu") == "cpu"
    assert campaign.pytest_counts("x\n2 failed, 30 passed, 4 deselected, 1 warning in 12.50s\n") == dict(
        failed=2, passed=30, deselected=4, warning=1)
    assert campaign.pytest_counts("..F.s. [ 40%]\n..") ["failed"] == 1  # killed before its summary


def test_results_name_no_machine_paths():
    campaign = _campaign()
    out = Path("/srv/run/out")
    text = campaign.scrub(f"{sys.executable} -m x --out {out}/a --workdir=/tmp/abc/train {ROOT}/tests", out)
    assert text == "python -m x --out $OUT/a --workdir=.../train tests"
