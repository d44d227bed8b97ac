"""Per-phase means of the step metrics over an iteration, and the watchdog for non-finite steps."""

from __future__ import annotations

import jax

from archer_jax.errors import TrainingError


class StepMetrics:
    """Sums each phase's step metrics (``critic/loss``, ...) until :meth:`means`, and stops the
    run after ``limit`` consecutive steps with a non-finite loss or gradient."""

    def __init__(self, limit: int):
        self.limit = limit
        self.consecutive = 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, prefix: str, metrics: dict) -> None:
        """Adds one step's metrics under ``prefix``; raises :class:`TrainingError` at the limit."""
        metrics = jax.device_get(metrics)
        nonfinite = int(metrics.get("nonfinite", 0))
        self.consecutive = self.consecutive + 1 if nonfinite else 0
        for k, v in metrics.items():
            key = f"{prefix}/{k}"
            if k in ("skipped",):
                self.sums[key], self.counts[key] = float(v), 1  # a running counter: keep the last
                continue
            self.sums[key] = self.sums.get(key, 0.0) + float(v)
            self.counts[key] = self.counts.get(key, 0) + 1
        if self.consecutive >= self.limit:
            raise TrainingError(
                f"{self.consecutive} consecutive {prefix} steps had a non-finite loss or gradient "
                f"(config.max_nonfinite_steps={self.limit}); each was skipped, parameters unchanged"
            )

    def means(self) -> dict[str, float]:
        """The means since the last call (``*/nonfinite``: the count of skipped steps)."""
        out = {}
        for k, v in self.sums.items():
            if k.endswith("/nonfinite"):
                out[k] = v  # how many steps of the iteration were skipped
            else:
                out[k] = v / self.counts[k]
        self.sums, self.counts = {}, {}
        return out
