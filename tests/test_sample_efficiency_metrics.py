"""benchmarks/sample_efficiency.py's measures, on hand-made eval curves: the samples to first reach
a return threshold, the samples from which the return stays at or above it, and the ratios to ArCHer."""

from __future__ import annotations

import pytest

from tests.benchmark_scripts import imported


@pytest.fixture(scope="module")
def se():
    """The benchmark module, imported as its script does."""
    yield from imported("sample_efficiency")


def curve(*points: tuple[int, float]) -> list[dict]:
    return [{"env_samples": s, "eval/return": r} for s, r in points]


def summary(method: str, seed: int, evals: list[dict]) -> dict:
    return dict(method=method, agent=method, config=dict(seed=seed), evals=evals, env_samples=evals[-1]["env_samples"])


def test_first_reached_and_held(se):
    touched_then_fell = curve((0, -5.2), (100, -4.0), (200, -12.0), (300, -12.0))
    assert se.samples_to(touched_then_fell, -4.3) == 100
    assert se.samples_held(touched_then_fell, -4.3) is None
    recovers = curve((0, -5.2), (100, -4.0), (200, -6.0), (300, -4.3), (400, -3.5))
    assert se.samples_to(recovers, -4.3) == 100
    assert se.samples_held(recovers, -4.3) == 300  # the threshold itself counts as reached
    never = curve((0, -5.2), (100, -5.0))
    assert se.samples_to(never, -4.3) is None and se.samples_held(never, -4.3) is None
    from_start = curve((0, -3.0), (100, -3.1))
    assert se.samples_to(from_start, -4.3) == 0 and se.samples_held(from_start, -4.3) == 0


def test_means_over_the_seeds_that_got_there_and_ratios_to_archer(se):
    runs = [
        summary("archer", 0, curve((0, -5.0), (1000, -4.0), (2000, -3.5))),
        summary("archer", 1, curve((0, -5.0), (1000, -4.5), (3000, -3.9))),
        summary("ppo_gae", 0, curve((0, -5.0), (500, -4.0), (1500, -6.0))),
        summary("ppo_gae", 1, curve((0, -5.0), (500, -5.0), (1500, -4.2))),
        summary("ppo_grpo", 0, curve((0, -5.0), (4000, -6.0))),
    ]
    rows = {r["method"]: r for r in se.efficiency(runs, -4.3)}
    archer, gae, grpo = rows["archer"], rows["ppo_gae"], rows["ppo_grpo"]
    assert archer["samples_to_threshold"] == {0: 1000, 1: 3000} and archer["mean_samples"] == 2000
    assert archer["mean_held"] == 2000 and archer["ratio_to_archer"] == 1.0
    assert gae["samples_to_threshold"] == {0: 500, 1: 1500} and gae["reached"] == 2
    assert gae["ratio_to_archer"] == pytest.approx(1000 / 2000)
    assert gae["samples_held"] == {0: None, 1: 1500} and gae["held"] == 1
    assert gae["held_ratio_to_archer"] == pytest.approx(1500 / 2000)
    assert grpo["reached"] == 0 and grpo["mean_samples"] is None and grpo["ratio_to_archer"] is None
    quality = [dict(agent=m, before=-5.0, after_mean=-4.0, after_std=0.1, wall_s=10.0) for m in rows]
    text = se.table(list(rows.values()), quality, -4.3)
    assert "| ppo_gae | -5.00 | -4.00 ± 0.10 | 500, 1500 | 1000 (2/2) | 0.50x | never, 1500 | 1500 (1/2) | 0.75x |" in text
    # Never reached: more than the run's samples (4000) over ArCHer's mean (2000).
    assert "| ppo_grpo | -5.00 | -4.00 ± 0.10 | never | - (0/1) | > 2.00x | never | - (0/1) | > 2.00x | 4000 |" in text
