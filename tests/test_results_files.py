"""Committed benchmark results name no machine's paths, and the benchmark writers keep it so."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
ABSOLUTE = re.compile(r"^(/|~|[A-Za-z]:[\\/]|\\\\)")  # POSIX, home, Windows drive, UNC
PATH_KEYS = ("out", "workdir", "profile", "cache_dir", "config_dir")


def _strings(value, where: str = ""):
    """(where, string) for every string (and key) in a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{where}/{k} (key)", k
            yield from _strings(v, f"{where}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")
    elif isinstance(value, str):
        yield where, value


def _machine_paths(value) -> list[str]:
    home, root = os.path.expanduser("~"), str(ROOT)
    found = []
    for where, text in _strings(value):
        if ABSOLUTE.match(text) or root in text or (len(home) > 1 and home in text) or "/home/" in text \
                or "/Users/" in text:
            found.append(f"{where}: {text!r}")
    return found


def test_there_are_results_to_check():
    assert len(RESULTS) >= 10


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_no_committed_result_holds_an_absolute_or_machine_path(path):
    data = json.loads(path.read_text())
    assert not _machine_paths(data), f"{path.name} names machine paths: {_machine_paths(data)}"
    config = data.get("config", {}) if isinstance(data.get("config"), dict) else {}
    for key in PATH_KEYS:
        if isinstance(config.get(key), str):
            assert not Path(config[key]).is_absolute() and ".." not in Path(config[key]).parts, (path.name, key)


def test_the_check_finds_machine_paths():
    assert _machine_paths({"config": {"out": "/srv/x/benchmarks/results"}})
    assert _machine_paths({"runs": [{"log": f"see {ROOT}/runs/a/train.log"}]})
    assert _machine_paths({"workdir": "~/runs/learning"})
    assert _machine_paths({"workdir": "C:\\Users\\me\\runs"})
    assert not _machine_paths({"out": "benchmarks/results", "unit": "tokens/s", "workdir": "runs/learning"})


@pytest.fixture(scope="module")
def common():
    """benchmarks/common.py, loaded from its file (the benchmarks run from their folder)."""
    spec = importlib.util.spec_from_file_location("benchmarks_common", ROOT / "benchmarks" / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_portable_makes_every_nested_path_repo_relative(common, tmp_path):
    outside = tmp_path / "elsewhere" / "learning_runs"
    value = {
        "out": str(ROOT / "benchmarks" / "results"),
        "workdir": outside,
        "nested": {"runs": [str(ROOT / "runs" / "learning" / "archer_seed0"), "~/cache/xla"]},
        "relative": "runs/x",
        "number": 3.5,
        "unit": "tokens/s",
    }
    assert common.portable(value) == {
        "out": "benchmarks/results",
        "workdir": "learning_runs",
        "nested": {"runs": ["runs/learning/archer_seed0", "xla"]},
        "relative": "runs/x",
        "number": 3.5,
        "unit": "tokens/s",
    }


def test_write_result_stores_no_absolute_path(common, tmp_path):
    path = common.write_result("probe", {"out": str(tmp_path), "profile": str(ROOT / "trace")}, [{"file": str(ROOT / "a")}],
                               out=tmp_path, extra={"workdir": str(tmp_path / "w")})
    data = json.loads(path.read_text())
    assert not _machine_paths(data), _machine_paths(data)
    assert data["config"]["profile"] == "trace" and data["rows"] == [{"file": "a"}]


def scripts_by_kind(readme: str) -> dict[str, list[str]]:
    """The script names in each row of benchmarks/README.md's table of scripts by kind."""
    section = readme.split("## The scripts, by kind", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| ") and "`" in line]
    return {cells[1].strip(): re.findall(r"`([\w.]+\.(?:py|sh))`", cells[2]) for cells in rows}


def test_every_benchmark_script_has_one_kind_in_the_readme():
    listed = [name for names in scripts_by_kind((ROOT / "benchmarks" / "README.md").read_text()).values()
              for name in names]
    present = sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh"))
    assert sorted(listed) == present  # each once, none missing, none stale


def test_the_kind_check_sees_a_missing_script():
    table = "## The scripts, by kind\n\n| kind | scripts |\n|---|---|\n| speed | `iteration.py`, `learner.py` |\n"
    assert scripts_by_kind(table) == {"speed": ["iteration.py", "learner.py"]}
    assert scripts_by_kind(table.replace(", `learner.py`", "")) != scripts_by_kind(table)
