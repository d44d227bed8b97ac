"""The library's error types, in a module of their own so that any layer can raise them.

Each one's message is one line that names the config key, path or phase at fault; the train app
prints it after ``error:`` without a traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type or out of range; the message names the key."""


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. repeated non-finite losses); the message says why and what is kept."""


class CheckpointWriteError(TrainingError):
    """A checkpoint could not be written (a full disk, a path that is gone); the newer ones are intact."""


class RunInterrupted(TrainingError):
    """SIGINT, SIGTERM or SIGHUP stopped the run (after saving a checkpoint, where there was one to save)."""

    def __init__(self, signal_name: str, message: str):
        super().__init__(message)
        self.signal_name = signal_name


def one_line(error: BaseException) -> str:
    """An error as one short line: its type and the first line of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    return f"{type(error).__name__}: {text[:160]}" if text else type(error).__name__
