"""Progress of a long phase (SFT, critic pretraining, rollouts): a tqdm bar on a terminal, else a
log line every 30 seconds."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("archer_jax")

def format_duration(seconds: float) -> str:
    """``seconds`` for a reader: "42 s", "3 min 05 s", "2 h 07 min"."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min {int(seconds % 60):02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"



HEARTBEAT_S = 30.0  # seconds between progress lines of a long phase when no terminal shows a bar


class Heartbeat:
    """A long phase's progress (SFT steps, rollout turns) as a log line every ``every_s`` seconds:
    what a tqdm bar shows, where none is shown (nohup, CI, a log file). It takes the calls the
    loop makes on a tqdm bar: ``update``, ``set_postfix``, ``n``, and ``with``."""

    def __init__(self, total: int, desc: str, unit: str = "it", every_s: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.monotonic, logger: logging.Logger = log):
        self.total, self.desc, self.unit, self.every_s = total, desc, unit, every_s
        self.n = 0
        self.postfix: dict[str, Any] = {}
        self._clock, self._logger = clock, logger
        self._start = self._last = clock()

    def update(self, n: int = 1) -> None:
        """Counts ``n`` more units; logs a line when ``every_s`` seconds passed since the last one."""
        self.n += n
        now = self._clock()
        if now - self._last >= self.every_s:
            self._last = now
            self._logger.info("%s", self.line())

    def set_postfix(self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True, **values: Any) -> None:
        """Values shown at the end of the next line (as tqdm's ``set_postfix``)."""
        self.postfix = {**(ordered_dict or {}), **values}

    def line(self) -> str:
        """``SFT: step 120/300 (40%), 21 s elapsed, ETA 32 s, loss=12.345``."""
        elapsed = self._clock() - self._start
        parts = [f"{self.desc}: {self.unit} {self.n}/{self.total}"
                 + (f" ({100 * self.n / self.total:.0f}%)" if self.total else ""), f"{format_duration(elapsed)} elapsed"]
        if 0 < self.n < self.total:
            parts.append(f"ETA {format_duration(elapsed / self.n * (self.total - self.n))}")
        parts += [f"{k}={v}" for k, v in self.postfix.items()]
        return ", ".join(parts)

    def close(self) -> None:
        pass

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: int, desc: str, unit: str = "it", every_s: float = HEARTBEAT_S, stream: Any = None):
    """A tqdm bar when ``stream`` (default stderr, where tqdm draws) is a terminal; else a
    :class:`Heartbeat` that logs a line every ``every_s`` seconds."""
    stream = sys.stderr if stream is None else stream
    if _is_terminal(stream):
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, leave=False, file=stream)
    return Heartbeat(total, desc, unit, every_s=every_s)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
