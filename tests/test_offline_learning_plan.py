"""benchmarks/offline_learning.py's bookkeeping, on hand-made runs: results written as runs finish,
runs its results hold kept (not trained again) when their workdir is gone, and no run of another
study or dataset mixed in."""

from __future__ import annotations

import json
import sys

import pytest

from tests.benchmark_scripts import imported


@pytest.fixture(scope="module")
def ol():
    """The benchmark module, imported as its script does."""
    yield from imported("offline_learning")


# Per (variant, seed): the greedy eval returns at iterations 0, 5, 10.
RETURNS = {("iql_awr", 0): [-12.0, -10.0, -9.0], ("bc", 0): [-12.0, -11.5, -11.0],
           ("iql_awr", 1): [-12.0, -9.0, -8.0], ("bc", 1): [-12.0, -12.0, -11.0]}


@pytest.fixture
def fake(ol, monkeypatch, tmp_path):
    """make_dataset writes 4 dialogues (won in 3 lines, lost in 12 twice, won in 2: returns -2, -12,
    -12, -1); run_one writes the run's summary as the train app does, and records which runs it trained."""
    trained = []

    def make_dataset(workdir, episodes, mix, seed, max_turns):
        data = workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        games = [(3, True), (12, False), (12, False), (2, True)]
        (data / "train.json").write_text(json.dumps([{"lines": ["q"] * n, "correct": c} for n, c in games]))
        return data

    def run_one(config, workdir, data, variant, seed, overrides):
        """Iterations 10 (or ``iterations=`` of the overrides), an evaluation every 5; a run the
        workdir holds keeps its evaluations and adds the new ones (-7.0 each), as resumed runs do."""
        trained.append((variant, seed))
        run = ol.run_dir(workdir, variant, seed)
        run.mkdir(parents=True, exist_ok=True)
        n = ol.iterations(overrides) or 10
        evals = [{"iteration": 5 * i, "eval/return": r, "eval/success": 0.25 * i}
                 for i, r in enumerate(RETURNS[(variant, seed)])]
        if (run / "summary.json").is_file():
            evals = json.loads((run / "summary.json").read_text())["evals"]
        evals += [{"iteration": i, "eval/return": -7.0, "eval/success": 0.5} for i in range(evals[-1]["iteration"] + 5, n + 1, 5)]
        summary = dict(config=dict(seed=seed, iterations=n, actor_steps=10, bc_steps=20), iterations=n, evals=evals,
                       eval_return_before=evals[0]["eval/return"], eval_return_after=evals[-1]["eval/return"],
                       eval_success_after=evals[-1]["eval/success"], wall_time_s=3.0)
        (run / "summary.tmp").write_text(json.dumps(summary))
        (run / "summary.tmp").replace(run / "summary.json")  # whole, as the train app writes it
        return ol.finished(workdir, variant, seed) | dict(benchmark_wall_s=4.0)

    monkeypatch.setattr(ol, "make_dataset", make_dataset)
    monkeypatch.setattr(ol, "run_one", run_one)
    monkeypatch.setattr(ol, "machine", lambda: {"name": "test"})
    return trained


def main(ol, monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["offline_learning.py", "--variants", "iql_awr", "bc", *map(str, args)])
    ol.main()


def test_runs_the_results_hold_are_kept_and_studies_never_mix(ol, fake, monkeypatch, tmp_path):
    out, work = tmp_path / "results", tmp_path / "runs"
    main(ol, monkeypatch, "--seeds", 0, "--workdir", work, "--out", out, "--name", "conv")
    assert fake == [("iql_awr", 0), ("bc", 0)]
    first = json.loads((out / "conv.json").read_text())
    assert [(r["variant"], r["seed"], r["policy_steps_per_iteration"]) for r in first["runs"]] == [
        ("iql_awr", 0, 10), ("bc", 0, 20)]
    assert first["dataset"] == {"dialogues": 4, "mean_return": -6.75, "success": 0.5}
    # The workdir is gone (another machine): seed 0 stays in the tables, only seed 1 trains.
    main(ol, monkeypatch, "--seeds", 0, 1, "--workdir", tmp_path / "fresh", "--out", out, "--name", "conv")
    assert fake[2:] == [("iql_awr", 1), ("bc", 1)]
    both = json.loads((out / "conv.json").read_text())
    rows = {r["variant"]: r for r in both["rows"]}
    assert rows["iql_awr"]["seeds"] == 2 and rows["iql_awr"]["per_seed"] == [-9.0, -8.0]
    assert rows["bc"]["after_mean"] == -11.0 and rows["bc"]["best_mean"] == -11.0
    # Two rows in each table (results, then quarters with their header).
    assert (out / "conv.md").read_text().count("\n| ") == 2 + 3 and (out / "conv.png").stat().st_size > 0
    # Report only, from the records alone: the same tables.
    main(ol, monkeypatch, "--report-only", "--workdir", tmp_path / "empty", "--out", out, "--name", "conv")
    assert json.loads((out / "conv.json").read_text())["rows"] == both["rows"] and len(fake) == 4
    # Another study never reuses these runs, neither from the results nor from the workdir.
    with pytest.raises(SystemExit, match=r"conv.json: holds runs of another study \(override: \[\] there"):
        main(ol, monkeypatch, "--workdir", tmp_path / "x", "--out", out, "--name", "conv", "--override", "iterations=99")
    with pytest.raises(SystemExit, match=r"runs: holds runs of another study \(override"):
        main(ol, monkeypatch, "--workdir", work, "--out", out, "--name", "other", "--override", "iterations=99")
    # Nor another dataset.
    monkeypatch.setattr(ol, "dataset_stats", lambda data: {"dialogues": 5, "mean_return": -7.0, "success": 0.5})
    with pytest.raises(SystemExit, match="train.json: not the dataset"):
        main(ol, monkeypatch, "--seeds", 2, "--workdir", tmp_path / "y", "--out", out, "--name", "conv")
    (out / "conv.json").write_text("{not json")
    with pytest.raises(SystemExit, match="conv.json: not an offline_learning results file"):
        main(ol, monkeypatch, "--report-only", "--workdir", work, "--out", out, "--name", "conv")


def test_a_run_is_read_on_its_last_quarter_of_evaluations(ol):
    """Evaluations at iterations 0, 5, ..., 40: the last quarter is iterations 30, 35 and 40."""
    evals = [{"iteration": 5 * i, "eval/return": r} for i, r in enumerate([-12, -11, -10, -9, -8, -7, -6, -10, -8])]
    assert ol.last_quarter(evals) == pytest.approx(-8.0)
    runs = [dict(variant="bc", evals=evals, eval_return_before=-12.0, eval_return_after=-8.0, eval_success_after=0.5,
                 wall_time_s=1.0, policy_steps_per_iteration=10),
            dict(variant="bc", evals=evals[:5], eval_return_before=-12.0, eval_return_after=-8.0,
                 eval_success_after=0.5, wall_time_s=1.0, policy_steps_per_iteration=10)]
    (row,) = ol.aggregate(runs)
    # The second run ends at iteration 20: its last quarter is iterations 15 and 20 (-9, -8).
    assert row["tail_per_seed"] == pytest.approx([-8.0, -8.5]) and row["tail_mean"] == pytest.approx(-8.25)
    assert "| -8.25 ± 0.25 | -8.00, -8.50 |" in ol.table([row])
    # Quarters of the first run (iterations 5-10, 15-20, 25-30, 35-40; the start left out): -10.5,
    # -8.5, -6.5, -9; of the second (5, 10, 15, 20): -11, -10, -9, -8.
    assert ol.quarters(evals) == pytest.approx([-10.5, -8.5, -6.5, -9.0])
    assert row["quarters"] == pytest.approx([-10.75, -9.25, -7.75, -8.5]) and row["steps"] == 400
    assert "| 400 | -10.75 | -9.25 | -7.75 | -8.50 | -0.75 |" in ol.quarters_table([row])
    # An evaluation every 20 iterations of a 40-iteration run leaves quarters without one.
    sparse = [e for e in evals if e["iteration"] % 20 == 0]
    assert ol.quarters(sparse) == [None, -8.0, None, -8.0]


def test_extend_trains_a_shorter_studys_runs_on_and_keeps_its_results(ol, fake, monkeypatch, tmp_path):
    out, work = tmp_path / "results", tmp_path / "runs"
    main(ol, monkeypatch, "--seeds", 0, "--workdir", work, "--out", out, "--name", "short", "--override", "iterations=10")
    short = json.loads((out / "short.json").read_text())
    # Without --extend, a longer study is refused the workdir, and told how to take it over.
    with pytest.raises(SystemExit, match=r"runs: holds runs of another study .*; --extend trains its runs on"):
        main(ol, monkeypatch, "--seeds", 0, "--workdir", work, "--out", out, "--name", "long", "--override", "iterations=20")
    # Another change than iterations is never an extension; nor are fewer iterations.
    for override in (["iterations=20", "learner.actor_lr=1"], ["iterations=5"]):
        with pytest.raises(SystemExit, match="holds runs of another study"):
            main(ol, monkeypatch, "--seeds", 0, "--workdir", work, "--out", out, "--name", "x", "--extend",
                 "--override", *override)
    main(ol, monkeypatch, "--seeds", 0, "--workdir", work, "--out", out, "--name", "long", "--extend",
         "--override", "iterations=20")
    assert fake == [("iql_awr", 0), ("bc", 0)] * 2
    long = json.loads((out / "long.json").read_text())
    assert [e["iteration"] for e in long["runs"][0]["evals"]] == [0, 5, 10, 15, 20]
    assert {r["variant"]: r["per_seed"] for r in long["rows"]} == {"iql_awr": [-7.0], "bc": [-7.0]}
    assert json.loads((work / "study.json").read_text())["override"] == ["iterations=20"]
    # The shorter study keeps its results (from its file), and no longer claims the workdir.
    main(ol, monkeypatch, "--report-only", "--workdir", tmp_path / "empty", "--out", out, "--name", "short",
         "--override", "iterations=10")
    assert json.loads((out / "short.json").read_text())["rows"] == short["rows"]
    with pytest.raises(SystemExit, match="holds runs of another study"):
        main(ol, monkeypatch, "--seeds", 0, "--workdir", work, "--out", out, "--name", "short", "--override", "iterations=10")
