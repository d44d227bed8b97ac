"""What a run reports: TensorBoard events (and W&B), the console line, summary.json and learning_curve.png."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from archer_jax.tensorboard_writer import tensorboard_writer

log = logging.getLogger("archer_jax")

SUMMARY = "summary.json"
CURVE = "learning_curve.png"
HISTORY = "history.jsonl"


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

    def close(self) -> None:
        for w in self._writers:
            w.close()


def console_line(iteration: int, iterations: int, m: Mapping[str, float]) -> str:
    """One line per iteration: progress, returns, losses and time."""
    parts = [f"iteration {iteration}/{iterations}", f"env samples {int(m.get('env_samples', 0))}"]
    for key, label in (("rollout/return", "return"), ("rollout/success", "success"), ("eval/return", "eval return"),
                       ("eval/success", "eval success"), ("critic/loss", "critic loss"), ("actor/loss", "actor loss"),
                       ("bc/loss", "bc loss")):
        if key in m:
            parts.append(f"{label} {m[key]:.3g}")
    if "time/iteration" in m:
        parts.append(f"{m['time/iteration']:.1f} s")
    return " | ".join(parts)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_summary(workdir: Path, summary: Mapping[str, Any]) -> Path:
    """``summary.json`` (non-finite numbers written as null)."""
    path = Path(workdir) / SUMMARY
    path.write_text(json.dumps({k: _clean(v) for k, v in summary.items()}, indent=2, sort_keys=True) + "\n")
    return path


def plot_learning_curve(workdir: Path, evals: Sequence[Mapping[str, float]], title: str) -> Path:
    """``learning_curve.png``: greedy eval return and success rate against env samples."""
    # A Figure drawn on an Agg canvas: no pyplot, so the caller's matplotlib backend is left alone
    # (matplotlib.use("Agg") here would switch a notebook's inline plots off).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    samples = [e["env_samples"] for e in evals]
    fig = Figure(figsize=(6.4, 4.0), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot(samples, [e["eval/return"] for e in evals], "o-", color="tab:blue", label="eval return")
    ax.set_xlabel("env samples (transitions collected)")
    ax.set_ylabel("greedy eval return", color="tab:blue")
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    twin.plot(samples, [e["eval/success"] for e in evals], "s--", color="tab:orange", label="success rate")
    twin.set_ylabel("success rate", color="tab:orange")
    twin.set_ylim(-0.05, 1.05)
    ax.set_title(title)
    fig.tight_layout()
    path = Path(workdir) / CURVE
    fig.savefig(path)
    return path
