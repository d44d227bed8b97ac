"""Per-phase means of the step metrics over an iteration, and the watchdog for non-finite steps.

Steps return their metrics as device arrays; :class:`StepMetrics` keeps them there and fetches
them once per iteration (:meth:`StepMetrics.check`), so the host never waits on a step to queue
the next one.
"""

from __future__ import annotations

import jax

from archer_jax.errors import TrainingError


class StepMetrics:
    """Collects each phase's step metrics (``critic/loss``, ...) until :meth:`means`, and stops the
    run after ``limit`` consecutive steps with a non-finite loss or gradient."""

    def __init__(self, limit: int):
        self.limit = limit
        self.consecutive = 0
        self.pending: list[tuple[str, dict]] = []  # (prefix, device metrics) not fetched yet
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, prefix: str, metrics: dict) -> None:
        """Keeps one step's metrics under ``prefix`` (on the device until :meth:`check`)."""
        self.pending.append((prefix, metrics))

    def check(self) -> None:
        """Fetches the kept metrics from the devices (one transfer) and adds them up in step order;
        raises :class:`TrainingError` once ``limit`` consecutive steps were non-finite."""
        pending, self.pending = self.pending, []
        for prefix, metrics in zip([p for p, _ in pending], jax.device_get([m for _, m in pending])):
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
        self.check()
        out = {}
        for k, v in self.sums.items():
            if k.endswith("/nonfinite"):
                out[k] = v  # how many steps of the iteration were skipped
            else:
                out[k] = v / self.counts[k]
        self.sums, self.counts = {}, {}
        return out
