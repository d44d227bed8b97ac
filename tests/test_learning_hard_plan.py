"""benchmarks/learning_hard.py's bookkeeping, on hand-made runs: which runs it trains (finished ones
and those another run starts from are left out), and the paper's measure at PPO's final return."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_scripts import imported


@pytest.fixture(scope="module")
def lh():
    """The benchmark module, imported as its script does."""
    yield from imported("learning_hard")


def summary(method: str, seed: int, returns: list[float], step: int = 100) -> dict:
    evals = [{"env_samples": i * step, "eval/return": r} for i, r in enumerate(returns)]
    return dict(method=method, agent=method, config=dict(seed=seed, iterations=len(returns) - 1), evals=evals,
                env_samples=evals[-1]["env_samples"], eval_return_before=returns[0], eval_return_after=returns[-1],
                iterations=len(returns) - 1, wall_time_s=1.0, eval_success_after=0.0)


def test_finished_runs_and_runs_others_start_from_are_not_trained(lh, tmp_path, monkeypatch):
    monkeypatch.setattr(lh, "CITY_DATA", tmp_path / "city.json")
    with pytest.raises(SystemExit, match="city.json: missing"):
        lh.to_train(["city"], None, [0], tmp_path)
    (tmp_path / "city.json").write_text("[]")
    jobs = lh.to_train(["city"], None, [0, 1], tmp_path)
    assert jobs == [("city", "online_from_offline", 0), ("city", "online_from_sft", 0),
                    ("city", "online_from_offline", 1), ("city", "online_from_sft", 1)]
    # Alone, the run others start from is trained as any other.
    assert lh.to_train(["city"], ["offline_archer"], [0], tmp_path) == [("city", "offline_archer", 0)]
    done = lh.run_dir(tmp_path, "weak", "chai", 1)
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps(summary("chai", 1, [-10.0, -9.0])))
    # A run stopped by a signal writes its summary too: it is not finished, and is trained (resumed).
    stopped = lh.run_dir(tmp_path, "weak", "archer", 1)
    stopped.mkdir(parents=True)
    (stopped / "summary.json").write_text(json.dumps(dict(summary("archer", 1, [-10.0, -9.0]), stopped="SIGTERM")))
    jobs = lh.to_train(["weak"], ["archer", "chai"], [0, 1], tmp_path)
    assert jobs == [("weak", "archer", 0), ("weak", "chai", 0), ("weak", "archer", 1)]
    short = summary("archer", 1, [-10.0, -9.0])  # stopped early by an error: 1 of 3 iterations
    short["config"]["iterations"] = 3
    (stopped / "summary.json").write_text(json.dumps(short))
    assert ("weak", "archer", 1) in lh.to_train(["weak"], ["archer"], [1], tmp_path)


def test_the_paper_measure_is_a_fraction_of_ppos_samples(lh):
    ppo = [summary("ppo_gae", s, [-10.0, -9.0, -8.0, -7.0, -6.0]) for s in (0, 1)]  # -6 after 400 samples
    archer = [summary("archer", 0, [-10.0, -6.0, -7.0, -5.0, -5.0]),  # first at 100, holds from 300
              summary("archer", 1, [-10.0, -8.0, -5.5, -5.0, -4.0])]  # first at 200 and holds
    runs = archer + ppo
    final = -6.0
    t = lh.target(lh.se.efficiency(runs, final), runs)
    assert t["ppo_final_return"] == final and t["ppo_env_samples"] == 400
    a = t["methods"]["archer"]
    assert (a["mean_samples"], a["first_fraction_of_ppo"]) == (150, 150 / 400)
    assert (a["mean_held"], a["held_fraction_of_ppo"]) == (250, 250 / 400)
    assert t["methods"]["ppo_gae"]["first_fraction_of_ppo"] == 1.0
    assert lh.target(lh.se.efficiency(archer, final), archer) is None  # no PPO runs: no measure


def test_the_threshold_is_halfway_to_the_best_final_return(lh):
    runs = [summary("archer", 0, [-9.0, -10.0]), summary("archer", 1, [-9.0, -9.5]),
            summary("chai", 0, [-11.0, -8.0]), summary("ppo_gae", 0, [-9.0, -12.0])]
    threshold, basis = lh.threshold_of(runs)
    assert threshold == pytest.approx(-8.5)  # halfway from ArCHer's start, -9, to CHAI's -8
    assert "CHAI's (-8.00)" in basis and "(-9.00)" in basis
    threshold, basis = lh.threshold_of([summary("archer", 0, [-9.0, -7.0]), summary("chai", 0, [-9.0, -7.0])])
    assert threshold == pytest.approx(-8.0) and "ArCHer's (-7.00)" in basis  # a tie goes to ArCHer
    assert lh.threshold_of(runs[:2] + runs[3:])[0] is None  # no method ends above the start
    assert lh.threshold_of(runs[2:]) == (None, "")  # no ArCHer run: no start to measure from


def test_the_train_time_reading_averages_each_window_of_played_games(lh):
    run = summary("archer", 0, [-9.0, -8.0])
    returns = [-12.0, -11.0, -10.0, -9.0, -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0]  # 11 iterations
    run["rollouts"] = [dict(iteration=i + 1, env_samples=30 * (i + 1), ret=r, success=float(r > -5),
                            invalid=0.1 * (i % 2)) for i, r in enumerate(returns)]
    played = lh.sampled(run, window=5)
    points = [(e["env_samples"], e["eval/return"], e["eval/success"]) for e in played["evals"]]
    # The first iteration's games, then iterations 1-5 and 6-10; the 11th has no full window yet.
    assert points == [(0, -12.0, 0.0), (150, -10.0, 0.0), (300, -5.0, 0.4)]
    assert (played["eval_return_before"], played["eval_return_after"], played["eval_success_after"]) == (-12.0, -5.0, 0.4)
    assert [e["eval/invalid"] for e in played["evals"]] == pytest.approx([0.0, 0.04, 0.06])
    assert run["evals"][-1]["eval/return"] == -8.0  # the greedy reading is left as it was
    reading = lh.measures([played, lh.sampled(dict(run, method="chai", agent="chai"), window=5)])
    assert reading["invalid"]["archer"] == pytest.approx([0.0, 0.06])
    assert lh.sampled(dict(run, rollouts=[]), window=5) is None  # an offline run plays no games


def test_the_paper_measure_takes_the_best_tuned_ppo(lh):
    runs = [summary("archer", 0, [-10.0, -7.0, -6.0]),
            summary("ppo_gae", 0, [-10.0, -11.0, -12.0]),  # the default collapses
            summary("ppo_gae_lr3", 0, [-10.0, -8.0, -7.0]), summary("ppo_grpo", 0, [-10.0, -5.0, -4.0])]
    assert lh.best_ppo(runs) == "ppo_gae_lr3"  # GRPO is not a PPO + GAE tuning
    t = lh.target(lh.se.efficiency(runs, -7.0), runs)
    assert t["ppo"] == "ppo_gae_lr3" and t["ppo_final_return"] == -7.0
    assert t["methods"]["archer"]["first_fraction_of_ppo"] == 100 / 200
    assert "at or below its start" not in lh.target_table(t)
    collapsed = lh.target(lh.se.efficiency(runs, -12.0), runs, "ppo_gae")
    assert "at or below its start (-10.00)" in lh.target_table(collapsed)


def test_the_sampled_evaluation_reading_takes_the_eval_sampled_metrics(lh):
    run = summary("offline_archer", 0, [-12.0, -10.0])
    assert lh.sampled_evaluation(run) is None  # a run without eval_sampled
    for e, r in zip(run["evals"], (-11.0, -7.0)):
        e.update({"iteration": 0, "eval/success": 0.0, "eval_sampled/return": r, "eval_sampled/success": 0.5})
    read = lh.sampled_evaluation(run)
    assert [e["eval/return"] for e in read["evals"]] == [-11.0, -7.0]
    assert (read["eval_return_before"], read["eval_return_after"], read["eval_success_after"]) == (-11.0, -7.0, 0.5)
    assert run["eval_return_after"] == -10.0  # the greedy reading is left as it was


def test_city_and_full_runs_evaluate_sampled_too(lh, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(lh.learning, "run_one", lambda config, workdir, agent, seed, overrides: calls.append(overrides) or {})
    lh.train("city", "online_from_sft", 0, tmp_path)
    lh.train("weak", "archer", 0, tmp_path)
    lh.train("full", "ppo_gae", 1, tmp_path)  # the full game's runs share one SFT
    assert calls == [["eval_sampled=True"], [f"sft.cache={tmp_path}/weak/sft_cache"],
                     ["ppo.adv_estimator=gae", "eval_sampled=True", f"sft.cache={tmp_path}/full/sft_cache"]]


def test_ratios_are_to_the_best_tuned_archer(lh):
    runs = [summary("archer", 0, [-10.0, -11.0, -12.0]),  # the default never reaches -8
            summary("archer_warm", 0, [-10.0, -9.0, -7.0]),  # first at 200
            summary("archer_utd2", 0, [-10.0, -9.5, -9.0]),
            summary("chai", 0, [-10.0, -8.0, -8.0])]  # first at 100
    assert lh.best_of(runs, "archer") == "archer_warm"
    assert lh.best_of(runs, "ppo_gae") is None
    rows = {r["method"]: r for r in lh.measures(runs)["rows"]}  # threshold halfway to -7: -8.5
    assert rows["chai"]["ratio_to_archer"] == 100 / 200 and rows["archer_warm"]["ratio_to_archer"] == 1.0
    text = lh.se.table(list(rows.values()), lh.learning.aggregate(runs), -8.5)
    assert text.startswith("Ratios to ArCHer are to archer_warm.") and "> 1.00x" in text  # the default: never
    plain = lh.se.efficiency(runs, -8.5)  # the default reference: plain ArCHer, which never gets there
    assert all(r["ratio_to_archer"] is None for r in plain)
    assert lh.se.table(plain, lh.learning.aggregate(runs), -8.5).startswith("| method")


def test_samples_after_a_warm_up_are_counted_from_the_policys_first_update(lh, tmp_path):
    # A run's history: the critic alone for two iterations, then the actor too.
    run = lh.run_dir(tmp_path, "utd", "archer_warm", 0)
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary("archer_warm", 0, [-10.0, -10.0, -8.0])))
    rows = [{"iteration": i, "env_samples": 100 * i, "rollout/return": -10.0, "rollout/success": 0.0,
             "time/actor": 0.0 if i <= 2 else 1.5} for i in (1, 2, 3, 4)]
    (run / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    warm = lh.finished("utd", "archer_warm", 0, tmp_path)
    assert warm["actor_from"] == 300  # iteration 3's samples were collected before its first actor step
    chai = summary("chai", 0, [-10.0, -9.0, -8.0])
    reading = lh.measures([summary("archer", 0, [-10.0, -9.0, -8.0]) | dict(actor_from=100),
                           warm | dict(evals=[dict(e, env_samples=200 * i) for i, e in enumerate(warm["evals"])]),
                           chai | dict(actor_from=None)])
    # Threshold halfway from -10 to -8: -9; ArCHer first at 100 (0 after its update at 100), the
    # warmed-up one at 400 (100 after 300); CHAI has no policy update and no entry.
    assert reading["after_first_update"] == {"archer": [0], lh.METHODS["archer_warm"][0]: [100]}


def write_runs(lh, workdir, trained: dict) -> None:
    """Finished runs in ``workdir``: ``{(setting, method, seed): eval returns}``, each with five
    iterations of games (the policy's first update in the second)."""
    games = [{"iteration": i, "env_samples": 100 * i, "rollout/return": -10.0 + i, "rollout/success": 0.0,
              "critic/q1/std": 0.5 * i, "time/actor": 0.0 if i == 1 else 1.0} for i in range(1, 6)]
    for (setting, method, seed), returns in trained.items():
        run = lh.run_dir(workdir, setting, method, seed)
        run.mkdir(parents=True)
        s = summary(method, seed, returns)
        for e in s["evals"]:
            e["eval/success"] = 0.5
        s["eval_success_after"] = 0.5
        (run / "summary.json").write_text(json.dumps(s))
        (run / "history.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))


def test_runs_the_results_hold_are_kept_when_their_workdir_is_gone(lh, tmp_path, monkeypatch):
    monkeypatch.setattr(lh, "BEFORE", tmp_path / "no_before.json")
    workdir, out = tmp_path / "runs", tmp_path / "results"
    trained = {("weak", "archer", 0): [-10.0, -9.0], ("weak", "chai", 1): [-10.0, -7.0],
               ("ablate", "archer_center", 0): [-10.0, -8.0]}  # the ablations' table shows weak's archer too
    write_runs(lh, workdir, trained)
    first = lh.write(workdir, out, 0.0)
    kept = lh.recorded(out)
    assert set(kept) == set(trained) and kept[("ablate", "archer_center", 0)]["actor_from"] == 200
    assert [d["q1_std"] for d in kept[("weak", "archer", 0)]["diagnostics"]] == [0.5, 1.0, 1.5, 2.0, 2.5]
    # The workdir is gone: the tables are the same, and no recorded run is trained again.
    again = lh.write(tmp_path / "elsewhere", out, 0.0)
    assert [r["quality"] for r in again] == [r["quality"] for r in first]
    assert [r["sampled"] for r in again] == [r["sampled"] for r in first]
    assert [r["first_update"] for r in again] == [r["first_update"] for r in first]
    jobs = lh.to_train(["weak"], ["archer", "chai"], [0, 1], tmp_path / "elsewhere", lh.recorded(out))
    assert jobs == [("weak", "chai", 0), ("weak", "archer", 1)]
    assert lh.to_train(["ablate"], ["archer_center"], [0], tmp_path, kept) == []
    # A finished run in the workdir takes the place of its record.
    run = lh.run_dir(tmp_path / "elsewhere", "weak", "chai", 1)
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary("chai", 1, [-10.0, -6.0])))
    assert lh.summaries_of("weak", tmp_path / "elsewhere", kept)[-1]["eval_return_after"] == -6.0
    (out / lh.FILES[0]).write_text("{not json")
    with pytest.raises(SystemExit, match="learning_hard.json: not a learning_hard results file"):
        lh.recorded(out)


def test_the_report_says_whether_the_runs_share_one_sft_start(lh):
    sft = dict(steps=600, pairs=8296, first_loss=67.3, last_loss=0.3135, seconds=910.0, cache="/somewhere")
    runs = [summary("archer", 0, [-16.0, -15.0]) | dict(sft=sft), summary("ppo_gae_lam1", 0, [-16.0, -14.0]) | dict(sft=sft),
            summary("chai", 0, [-16.0, -15.0])]  # a run recorded without its SFT is left out
    (one,) = lh.sft_starts(runs)
    assert one["runs"] == ["archer:0", "ppo_gae_lam1:0"] and "seconds" not in one
    text = lh.markdown([dict(title="t", config="c", overrides={}, sft_starts=[one], rows=[], quality=[],
                             threshold=None, target=None)])
    assert "Every run with a recorded SFT starts from one: 600 steps on 8296 pairs" in text
    runs[1]["sft"] = dict(sft, last_loss=0.3285)
    starts = lh.sft_starts(runs)
    text = lh.markdown([dict(title="t", config="c", overrides={}, sft_starts=starts, rows=[], quality=[],
                             threshold=None, target=None)])
    assert len(starts) == 2 and "**The runs start from 2 different SFT results**" in text
    assert "-> 0.3285: ppo_gae_lam1:0" in text


def test_the_kept_sft_start_is_copied_into_the_workdir_cache_once(lh, tmp_path, monkeypatch):
    kept = tmp_path / "kept"
    (kept / "abc").mkdir(parents=True)
    (kept / "abc" / "params.npz").write_bytes(b"kept")
    monkeypatch.setattr(lh, "SFT_KEPT", {"full": kept})
    workdir = tmp_path / "runs"
    lh.seed_sft_cache(workdir, ["weak", "full"])
    cache = workdir / "full" / "sft_cache"
    assert [p.name for p in cache.iterdir()] == ["abc"] and (cache / "abc" / "params.npz").read_bytes() == b"kept"
    assert not (workdir / "weak").exists()
    (cache / "abc" / "params.npz").write_bytes(b"trained here")  # an entry already there is left as it is
    lh.seed_sft_cache(workdir, ["full"])
    assert (cache / "abc" / "params.npz").read_bytes() == b"trained here"


def test_same_start_trains_again_the_runs_from_another_sft_start(lh, tmp_path, monkeypatch):
    kept = tmp_path / "kept" / "abc"
    kept.mkdir(parents=True)
    start = dict(steps=600, pairs=8296, first_loss=67.3, last_loss=0.365)
    (kept / "meta.json").write_text(json.dumps(dict(leaves=2, info=dict(start, skipped=0.0, seconds=200.0))))
    monkeypatch.setattr(lh, "SFT_KEPT", {"full": tmp_path / "kept"})
    assert lh.kept_starts("full") == [start] and lh.kept_starts("weak") == []
    other = dict(start, last_loss=0.314)
    records = {("full", "chai", 0): summary("chai", 0, [-16.0, -15.0]) | dict(sft=other),
               ("full", "chai", 1): summary("chai", 1, [-16.0, -15.0]) | dict(sft=start)}
    workdir = tmp_path / "runs"
    finished_here = lh.run_dir(workdir, "full", "filtered_bc", 0)
    finished_here.mkdir(parents=True)
    (finished_here / "summary.json").write_text(json.dumps(summary("filtered_bc", 0, [-16.0, -14.0]) | dict(sft=other)))
    args = (["full"], ["chai", "filtered_bc"], [0, 1], workdir, records)
    assert lh.to_train(*args) == [("full", "filtered_bc", 1)]
    jobs = lh.to_train(*args, same_start=True)
    assert jobs == [("full", "chai", 0), ("full", "filtered_bc", 0), ("full", "filtered_bc", 1)]
    for job in jobs:
        lh.set_aside(job, workdir)
    assert not finished_here.exists()
    assert json.loads((finished_here.with_name("filtered_bc_seed0.other_start") / "summary.json").read_text())["sft"] == other


def test_the_tables_show_archer_before_the_fixes_and_carry_what_they_left_alone(lh, tmp_path, monkeypatch):
    """The results of the code before the fixes: their ArCHer runs appear beside the fixed code's as
    "before the fixes"; filtered BC's (a code path the fixes left alone) are read as this code's and
    not trained again; their other runs are not shown."""
    old_workdir, old_out = tmp_path / "old", tmp_path / "old_results"
    write_runs(lh, old_workdir, {("weak", "archer", 0): [-9.0, -10.0], ("weak", "filtered_bc", 0): [-9.0, -8.5],
                                 ("weak", "ppo_gae", 0): [-9.0, -12.0]})
    monkeypatch.setattr(lh, "BEFORE", tmp_path / "none.json")
    lh.write(old_workdir, old_out, 0.0)
    monkeypatch.setattr(lh, "BEFORE", old_out / lh.FILES[0])
    workdir, out = tmp_path / "runs", tmp_path / "results"
    write_runs(lh, workdir, {("weak", "archer", 0): [-9.0, -8.0]})
    (weak,) = [r for r in lh.write(workdir, out, 0.0) if r["setting"] == "weak"]
    finals = {row["agent"]: row["after_mean"] for row in weak["quality"]}
    assert finals == {"ArCHer 1x (the tiny preset's recipe), before the fixes": -10.0, "ArCHer": -8.0,
                      "filtered BC (online)": -8.5}
    kept = lh.recorded_before() | lh.recorded(out)
    assert lh.to_train(["weak"], ["archer", "filtered_bc", "ppo_gae"], [0], workdir, kept) == [("weak", "ppo_gae", 0)]
