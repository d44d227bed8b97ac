"""What a run reports: TensorBoard events (and W&B), the console line with the run's ETA,
summary.json and learning_curve.png (progress lines of long phases: :mod:`archer_jax.records.progress`)."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from archer_jax.records.progress import format_duration
from archer_jax.records.tensorboard_writer import tensorboard_writer

log = logging.getLogger("archer_jax")

SUMMARY = "summary.json"
CURVE = "learning_curve.png"


class WandbWriter:
    """A writer (the methods of clu's) that forwards scalars and hyperparameters to Weights & Biases."""

    def __init__(self, project: str, config: Mapping[str, Any], workdir: Path):
        try:
            import wandb
        except ImportError:
            raise ImportError("config.use_wandb: wandb is not installed (pip install wandb)") from None
        self._run = wandb.init(project=project, config=dict(config), dir=os.fspath(workdir), resume="allow",
                               id=Path(workdir).absolute().name)

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        self._run.log(dict(scalars), step=step)

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        self._run.config.update(dict(hparams), allow_val_change=True)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._run.finish()


class Writers:
    """TensorBoard event files in the workdir (written without TensorFlow) and optionally W&B, from
    the first process only."""

    def __init__(self, workdir: Path, *, use_wandb: bool = False, wandb_project: str = "", config: Mapping | None = None):
        self.workdir = Path(workdir)
        primary = jax.process_index() == 0
        board = tensorboard_writer(self.workdir) if primary else None
        self._writers: list = [board] if board is not None else []
        if use_wandb and primary:
            self._writers.append(WandbWriter(wandb_project, config or {}, self.workdir))
        self._primary = primary

    def hparams(self, hparams: Mapping[str, Any]) -> None:
        flat = {k: v for k, v in hparams.items() if isinstance(v, (int, float, str, bool))}
        for w in self._writers:
            w.write_hparams(flat)

    def scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        finite = {k: v for k, v in scalars.items() if isinstance(v, (int, float))}
        for w in self._writers:
            w.write_scalars(step, finite)
            w.flush()

    def texts(self, step: int, texts: Mapping[str, str]) -> None:
        """Text summaries, where a writer takes them (TensorBoard's Text tab)."""
        for w in self._writers:
            if hasattr(w, "write_texts"):
                w.write_texts(step, texts)
                w.flush()

    def close(self) -> None:
        for w in self._writers:
            w.close()


def console_line(iteration: int, iterations: int, m: Mapping[str, float], eta_s: float | None = None) -> str:
    """One line per iteration: progress, returns, losses, time and, given ``eta_s`` (e.g.
    :meth:`Progress.eta_s`), the time the rest of the run will take."""
    parts = [f"iteration {iteration}/{iterations}", f"env samples {int(m.get('env_samples', 0))}"]
    for key, label in (("rollout/return", "return"), ("rollout/success", "success"), ("eval/return", "eval return"),
                       ("eval/success", "eval success"), ("critic/loss", "critic loss"), ("actor/loss", "actor loss"),
                       ("bc/loss", "bc loss")):
        if key in m:
            parts.append(f"{label} {m[key]:.3g}")
    if "time/iteration" in m:
        parts.append(f"{m['time/iteration']:.1f} s")
    if eta_s is not None and iteration < iterations:
        parts.append(f"ETA {format_duration(eta_s)}")
    return " | ".join(parts)


class Progress:
    """The ETA of a run of ``total`` iterations, from how long its iterations have taken.

    Create it just before the loop (``done``: iterations finished before, e.g. on resume) and call
    :meth:`step` after each iteration. The first iteration of a session compiles most programs, so
    once two are done the time per iteration is measured from the end of the first one.
    """

    def __init__(self, total: int, done: int = 0, clock: Callable[[], float] = time.monotonic):
        self.total, self.done = total, done
        self._clock = clock
        self._start = clock()
        self._first_end: float | None = None
        self._last_end: float | None = None
        self._steps = 0

    def step(self, iteration: int | None = None) -> None:
        """Marks an iteration finished: ``iteration`` (its number), by default the next one."""
        self.done = self.done + 1 if iteration is None else iteration
        now = self._clock()
        if self._first_end is None:
            self._first_end = now
        self._last_end, self._steps = now, self._steps + 1

    def seconds_per_iteration(self) -> float | None:
        """Mean seconds per iteration of this session (after its first, once there are two); None before any."""
        if self._steps == 0:
            return None
        if self._steps == 1:
            return self._first_end - self._start
        return (self._last_end - self._first_end) / (self._steps - 1)

    def eta_s(self) -> float | None:
        """Seconds until the last iteration ends at the current pace; 0 when done, None before any."""
        remaining = max(self.total - self.done, 0)
        if remaining == 0:
            return 0.0
        rate = self.seconds_per_iteration()
        return None if rate is None else remaining * rate


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_summary(workdir: Path, summary: Mapping[str, Any]) -> Path:
    """``summary.json`` (non-finite numbers written as null), replaced whole: a reader (a benchmark
    watching its runs) never sees it half written."""
    path = Path(workdir) / SUMMARY
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps({k: _clean(v) for k, v in summary.items()}, indent=2, sort_keys=True) + "\n")
    os.replace(temp, path)
    return path


# The optimal scripted expert (archer_jax/envs/experts.py) over every secret of the game, alone
# in the env with 20 turns: (mean return, most turns it needs). A reference for learning curves;
# tests/records/test_report.py plays it again and checks these numbers.
OPTIMAL_EXPERT = {
    "twenty_questions_subset": (-3.1, 6),  # 10 objects: 4.1 questions on average
    "twenty_questions": (-7.101910828025478, 11),  # 157 objects: 8.1 questions
    "guess_my_city": (-6.252747252747253, 10),  # 91 cities: 7.3 questions
}


def optimal_return(env_name: str, max_turns: int) -> float | None:
    """The optimal scripted expert's mean return in ``env_name`` where it is known and every game
    it plays fits in ``max_turns``; else None."""
    mean, turns = OPTIMAL_EXPERT.get(env_name, (None, None))
    return mean if mean is not None and turns <= max_turns else None


def learning_curve_figure(evals: Sequence[Mapping[str, float]], title: str, *, sft: bool = False,
                          optimum: float | None = None, optimum_label: str = "optimal expert (mean over secrets)",
                          offline: bool | None = None):
    """The learning curve as a matplotlib ``Figure`` (no pyplot): greedy eval return (and the
    sampled one, where evaluated) and success rate against env samples (an ``offline`` run's: against iterations; None: offline when
    several evaluations have no env samples), a dotted line at the iteration-0 evaluation (the start, "after
    SFT" when ``sft``), a dash-dot line at ``optimum`` when given, and a legend naming them. The
    x axis starts at 0 and has whole-number ticks."""
    # A Figure drawn on an Agg canvas: no pyplot, so the caller's matplotlib backend is left alone
    # (matplotlib.use("Agg") here would switch a notebook's inline plots off).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from matplotlib.ticker import MaxNLocator

    # An offline run collects nothing: its evaluations are placed by iteration instead.
    if offline is None:
        offline = len(evals) > 1 and not any(e["env_samples"] for e in evals)
    samples = [e["iteration"] if offline else e["env_samples"] for e in evals]
    fig = Figure(figsize=(6.4, 4.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot(samples, [e["eval/return"] for e in evals], "o-", color="tab:blue", label="eval return")
    sampled = [(x, e["eval_sampled/return"]) for x, e in zip(samples, evals) if "eval_sampled/return" in e]
    if sampled:  # eval_sampled: the same games at the rollouts' sampling
        ax.plot(*zip(*sampled), "^-", color="tab:purple", alpha=0.8, label="eval return, sampled")
    if evals and evals[0].get("iteration", 0) == 0:
        start = evals[0]["eval/return"]
        ax.axhline(start, color="tab:gray", linestyle=":", label=f"{'after SFT' if sft else 'start'} (iteration 0): {start:.2f}")
    if optimum is not None:
        ax.axhline(optimum, color="tab:green", linestyle="-.", label=f"{optimum_label}: {optimum:.2f}")
    ax.set_xlabel("iteration (offline: learner steps on the dataset)" if offline
                  else "env samples (transitions collected)")
    ax.set_ylabel("greedy eval return", color="tab:blue")
    ax.grid(alpha=0.3)
    right = max(samples, default=0) or 1  # a run with one evaluation, or none past the start
    ax.set_xlim(-0.03 * right, 1.03 * right)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    twin = ax.twinx()
    twin.plot(samples, [e["eval/success"] for e in evals], "s--", color="tab:orange", label="success rate")
    twin.set_ylabel("success rate", color="tab:orange")
    twin.set_ylim(-0.05, 1.05)
    lines, labels = ax.get_legend_handles_labels()
    twin_lines, twin_labels = twin.get_legend_handles_labels()
    ax.set_title(title)
    # Below the axes, where it hides no point.
    twin.legend(lines + twin_lines, labels + twin_labels, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
                fontsize="small", frameon=False)
    fig.tight_layout()
    return fig


def plot_learning_curve(workdir: Path, evals: Sequence[Mapping[str, float]], title: str, *, sft: bool = False,
                        optimum: float | None = None, optimum_label: str = "optimal expert (mean over secrets)",
                        offline: bool | None = None) -> Path:
    """``learning_curve.png`` in ``workdir``: :func:`learning_curve_figure` saved."""
    path = Path(workdir) / CURVE
    learning_curve_figure(evals, title, sft=sft, optimum=optimum, optimum_label=optimum_label,
                          offline=offline).savefig(path)
    return path
