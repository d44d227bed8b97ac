"""What a run reports: the console line's ETA, progress lines without a terminal, the learning
curve's legend and reference lines, and the optimal expert's returns used for them."""

from __future__ import annotations

import io
import logging

import pytest

from archer_jax.records import report
from archer_jax.records.progress import Heartbeat, format_duration, progress_bar


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (42.4, "42 s"), (185, "3 min 05 s"), (3599, "59 min 59 s"),
                                           (7620, "2 h 07 min"), (-3, "0 s")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_console_line_adds_the_eta_when_given_and_is_unchanged_without_it():
    m = {"env_samples": 286, "rollout/return": -8.41, "rollout/success": 0.531, "critic/loss": 1.65, "time/iteration": 24.4}
    plain = "iteration 1/30 | env samples 286 | return -8.41 | success 0.531 | critic loss 1.65 | 24.4 s"
    assert report.console_line(1, 30, m) == plain
    assert report.console_line(1, 30, m, eta_s=185.0) == plain + " | ETA 3 min 05 s"
    assert "ETA" not in report.console_line(30, 30, m, eta_s=0.0)  # the last iteration needs no ETA


def test_progress_eta_leaves_out_the_first_iteration_once_two_are_done():
    clock = Clock(0.0)
    progress = report.Progress(total=10, clock=clock)
    assert progress.eta_s() is None and progress.seconds_per_iteration() is None
    clock.now = 50.0  # the first iteration compiles
    progress.step()
    assert progress.done == 1 and progress.eta_s() == pytest.approx(9 * 50.0)
    clock.now = 60.0
    progress.step()
    clock.now = 76.0
    progress.step()
    assert progress.seconds_per_iteration() == pytest.approx(13.0)  # (76 - 50) / 2, not 76 / 3
    assert progress.eta_s() == pytest.approx(7 * 13.0)
    for _ in range(7):
        progress.step()
    assert progress.done == 10 and progress.eta_s() == 0.0


def test_progress_on_resume_counts_from_the_iteration_reached():
    clock = Clock(0.0)
    progress = report.Progress(total=30, done=20, clock=clock)
    clock.now = 12.0
    progress.step(21)
    assert progress.done == 21 and progress.eta_s() == pytest.approx(9 * 12.0)


def test_heartbeat_logs_a_line_with_eta_every_period_only(caplog):
    clock = Clock(0.0)
    caplog.set_level(logging.INFO, logger="archer_jax")
    with Heartbeat(300, "SFT", "step", every_s=30.0, clock=clock) as beat:
        for step in range(1, 61):
            clock.now = step * 1.0  # one step a second
            beat.update(1)
            beat.set_postfix(loss=f"{10 - step / 10:.3f}")  # shown from the next line on
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "SFT: step 30/300 (10%), 30 s elapsed, ETA 4 min 30 s, loss=7.100",
        "SFT: step 60/300 (20%), 1 min 00 s elapsed, ETA 4 min 00 s, loss=4.100",
    ]
    assert beat.n == 60


def test_heartbeat_follows_the_rollout_bar_calls(caplog):
    clock = Clock(0.0)
    caplog.set_level(logging.INFO, logger="archer_jax")
    beat = Heartbeat(12, "rollouts 3", "turn", every_s=10.0, clock=clock)
    for turn in (1, 2, 3):
        clock.now = 11.0 * turn
        beat.update(turn - beat.n)  # rollouts.py: bar.update(t - bar.n)
    assert [r.getMessage().split(",")[0] for r in caplog.records] == [
        "rollouts 3: turn 1/12 (8%)", "rollouts 3: turn 2/12 (17%)", "rollouts 3: turn 3/12 (25%)"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_is_tqdm_on_a_terminal_and_a_heartbeat_elsewhere():
    from tqdm.auto import tqdm

    quiet = progress_bar(10, "SFT", "step", stream=io.StringIO())
    assert isinstance(quiet, Heartbeat) and quiet.desc == "SFT" and quiet.unit == "step"
    with progress_bar(10, "SFT", "step", stream=_Terminal()) as bar:
        assert isinstance(bar, tqdm)
        bar.update(1)
        bar.set_postfix(loss="1.000")
        assert bar.n == 1


EVALS = [
    {"iteration": 0, "env_samples": 0, "eval/return": -5.1875, "eval/success": 0.8125},
    {"iteration": 5, "env_samples": 1400, "eval/return": -5.125, "eval/success": 0.8125},
    {"iteration": 10, "env_samples": 2800, "eval/return": -3.375, "eval/success": 1.0},
]


def _legend(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def _horizontal_lines(fig) -> dict[str, float]:
    """Label -> y of every horizontal reference line (two points at the same y, axes coordinates in x)."""
    out = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            x, y = line.get_xdata(), line.get_ydata()
            if len(y) == 2 and y[0] == y[1] and list(x) == [0, 1]:
                out[line.get_label()] = float(y[0])
    return out


def test_learning_curve_has_a_legend_the_sft_start_and_the_optimum():
    fig = report.learning_curve_figure(EVALS, "archer on twenty_questions_subset", sft=True, optimum=-3.4)
    assert _legend(fig) == ["eval return", "after SFT (iteration 0): -5.19", "optimal expert (mean over secrets): -3.40", "success rate"]
    assert _horizontal_lines(fig) == {"after SFT (iteration 0): -5.19": -5.1875, "optimal expert (mean over secrets): -3.40": -3.4}
    assert fig.axes[0].get_title() == "archer on twenty_questions_subset"


def test_learning_curve_without_sft_or_optimum_marks_only_the_start():
    fig = report.learning_curve_figure(EVALS, "t")
    assert _legend(fig) == ["eval return", "start (iteration 0): -5.19", "success rate"]
    resumed = report.learning_curve_figure(EVALS[1:], "t", sft=True)  # no iteration-0 evaluation: no start line
    assert _legend(resumed) == ["eval return", "success rate"]


def test_learning_curve_plots_the_sampled_evaluations_where_there_are_some():
    sampled = [dict(e, **{"eval_sampled/return": e["eval/return"] - 1.0}) for e in EVALS]
    fig = report.learning_curve_figure(sampled, "t")
    assert _legend(fig) == ["eval return", "eval return, sampled", "start (iteration 0): -5.19", "success rate"]
    (line,) = [l for l in fig.axes[0].get_lines() if l.get_label() == "eval return, sampled"]
    assert list(line.get_ydata()) == [e["eval/return"] - 1.0 for e in EVALS]
    assert list(line.get_xdata()) == [e["env_samples"] for e in EVALS]


OFFLINE = [{"iteration": 0, "env_samples": 0, "eval/return": -12.0, "eval/success": 0.0},
           {"iteration": 1, "env_samples": 0, "eval/return": -11.5, "eval/success": 0.0}]


@pytest.mark.parametrize("evals, offline, label", [
    (OFFLINE, True, "iteration"),        # a short offline run: no quarter-iteration ticks
    (OFFLINE[:1], True, "iteration"),    # an offline run stopped after its first evaluation
    (OFFLINE[:1], False, "env samples"),  # an online one: no axis from -0.04 to 0.04 env samples
    (EVALS, None, "env samples"),
])
def test_learning_curve_x_axis_has_whole_ticks_from_zero(evals, offline, label):
    fig = report.learning_curve_figure(evals, "t", offline=offline)
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith(label)
    left, right = ax.get_xlim()
    assert -0.05 * right <= left <= 0 and right >= max(1, max(e["iteration" if label == "iteration" else "env_samples"]
                                                              for e in evals))
    ticks = [t for t in ax.get_xticks() if left <= t <= right]
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


def test_plot_learning_curve_writes_a_png_and_keeps_its_old_call(tmp_path):
    path = report.plot_learning_curve(tmp_path, EVALS, "t")  # the loop's call, unchanged
    assert path == tmp_path / report.CURVE and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report.plot_learning_curve(tmp_path, EVALS, "t", sft=True, optimum=report.optimal_return("twenty_questions_subset", 12))
    assert path.stat().st_size > 0


def _play_optimal_expert(env_name: str) -> tuple[float, int]:
    """The optimal expert against every secret, 20 turns: (mean return, most turns)."""
    from archer_jax.envs import experts, guess_my_city, twenty_questions

    if env_name == "guess_my_city":
        env, expert = guess_my_city.GuessMyCity(max_turns=20), experts.city_expert("optimal")
        games = [c.name for c in guess_my_city.cities()]
        reset = lambda name: env.reset(city=name)  # noqa: E731
    else:
        subset = env_name == "twenty_questions_subset"
        env = twenty_questions.TwentyQuestionsSubset(max_turns=20) if subset else twenty_questions.TwentyQuestions(max_turns=20)
        expert = experts.expert("optimal", universe=twenty_questions.SUBSET if subset else None)
        games = [o.name for o in env.objects]
        reset = lambda name: env.reset(word=name)  # noqa: E731
    returns, longest = [], 0
    for name in games:
        observation, total, turns, done = reset(name), 0.0, 0, False
        while not done:
            result = env.step(expert.act(observation))
            observation, done = result.observation, result.done
            total, turns = total + result.reward, turns + 1
        assert result.info.success, f"the optimal expert lost {name!r}"
        returns.append(total)
        longest = max(longest, turns)
    return sum(returns) / len(returns), longest


@pytest.mark.parametrize("env_name", sorted(report.OPTIMAL_EXPERT))
def test_optimal_expert_returns_are_what_the_expert_plays(env_name):
    mean, longest = _play_optimal_expert(env_name)
    assert report.OPTIMAL_EXPERT[env_name] == (pytest.approx(mean, abs=1e-12), longest)


def test_optimal_return_only_where_known_and_reachable():
    mean, longest = report.OPTIMAL_EXPERT["twenty_questions_subset"]
    assert report.optimal_return("twenty_questions_subset", longest) == mean
    assert report.optimal_return("twenty_questions_subset", longest - 1) is None  # the turn limit cuts some games
    assert report.optimal_return("webshop", 10) is None and report.optimal_return("detective", 50) is None


# ---- the README's sample output is what the code prints -------------------------------------

_LABELS = {"return": "rollout/return", "success": "rollout/success", "eval return": "eval/return",
           "eval success": "eval/success", "critic loss": "critic/loss", "actor loss": "actor/loss", "bc loss": "bc/loss"}


def _seconds(text: str) -> float:
    """``"16 min 17 s"`` -> 977.0 (format_duration's forms)."""
    numbers = [int(t) for t in text.split() if t.isdigit()]
    scale = {"s": [1], "min": [60, 1], "h": [3600, 60]}[text.split()[1]]
    return float(sum(n * f for n, f in zip(numbers, scale)))


def _readme_iteration_lines() -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return [line for line in text.splitlines() if line.startswith("iteration ") and " | env samples " in line]


def test_the_readmes_sample_iteration_lines_are_what_console_line_prints():
    lines = _readme_iteration_lines()
    assert len(lines) >= 2, "the README's sample output has no iteration lines"
    for line in lines:
        parts = line.split(" | ")
        iteration, total = (int(v) for v in parts[0].removeprefix("iteration ").split("/"))
        metrics: dict[str, float] = {"env_samples": float(parts[1].removeprefix("env samples "))}
        eta = None
        for part in parts[2:]:
            if part.startswith("ETA "):
                eta = _seconds(part.removeprefix("ETA "))
            elif part.endswith(" s") and part[:-2].replace(".", "").isdigit():
                metrics["time/iteration"] = float(part[:-2])
            else:
                label, value = part.rsplit(" ", 1)
                assert label in _LABELS, f"{label!r} in the README's sample is not a label console_line prints"
                metrics[_LABELS[label]] = float(value)
        assert report.console_line(iteration, total, metrics, eta_s=eta) == line
