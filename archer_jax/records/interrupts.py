"""SIGINT, SIGTERM and SIGHUP as a request to stop the run cleanly (Ctrl-C; preemptible TPU VMs
and schedulers send SIGTERM before they kill a process; a closed terminal or a lost SSH session
sends SIGHUP; a run started under ``nohup`` keeps ignoring it).

    with Interrupts() as interrupts:
        with interrupts.abandonable():     # a phase that changes no state: stopped at once
            episodes = collect(...)
        learn(...)                         # a phase that changes state: finishes first
        if interrupts.stop_requested():    # the loop saves a checkpoint, writes its reports, stops

The first signal sets a request. Inside an :meth:`~Interrupts.abandonable` phase (rolling out,
the warm start) it raises :class:`Interrupted` at once, since nothing of that phase is
kept; elsewhere (storing transitions, learner steps, the greedy evaluation, saving) the phase
finishes and the loop stops at its next check. A second signal raises :class:`Interrupted` wherever the run is: the
checkpoint before is intact. With several processes a signal may reach only some hosts, so the
hosts agree on a stop at each check and no phase is abandoned half-way on one host alone.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from archer_jax.runtime import distributed

log = logging.getLogger("archer_jax")

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(Exception):
    """Raised in the main thread when a stop request cannot wait for the phase to finish."""

    def __init__(self, signal_name: str, twice: bool = False):
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.twice = twice


class Interrupts:
    """Installs handlers for :data:`SIGNALS` while active (main thread only; elsewhere signals
    keep their handlers and nothing is ever requested)."""

    def __init__(self) -> None:
        self.requested: str | None = None  # the name of the first signal received
        self._abandonable = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                if sig == getattr(signal, "SIGHUP", None) and signal.getsignal(sig) == signal.SIG_IGN:
                    continue  # started under nohup: a closed terminal is to leave the run alone
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:
            raise Interrupted(name, twice=True)
        self.requested = name
        if self._abandonable and not distributed.multiprocess():
            raise Interrupted(name)
        log.warning("%s: the run stops after the current phase and saves a checkpoint (again: stop at once)", name)

    @contextlib.contextmanager
    def abandonable(self) -> Iterator[None]:
        """A phase that a stop request may cut short (raising :class:`Interrupted`)."""
        if self.requested is not None and not distributed.multiprocess():
            raise Interrupted(self.requested)
        self._abandonable = True
        try:
            yield
        finally:
            self._abandonable = False

    def stop_requested(self) -> bool:
        """Whether the run should stop now: a signal reached this process (or, with several
        processes, any of them: a collective, so every host must call it at the same point)."""
        if distributed.multiprocess():
            names = [n for n in distributed.allgather_objects(self.requested) if n]
            if names and self.requested is None:
                self.requested = names[0]
        return self.requested is not None
