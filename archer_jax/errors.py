"""The library's error types, in a module of their own so that any layer can raise them.

Each one's message is one line that names the config key, path or phase at fault; the train app
prints it after ``error:`` without a traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value is unknown, of the wrong type or out of range; the message names the key."""


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. repeated non-finite losses); the message says why and what is kept."""


class RunInterrupted(TrainingError):
    """SIGINT, SIGTERM or SIGHUP stopped the run (after saving a checkpoint, where there was one to save)."""

    def __init__(self, signal_name: str, message: str):
        super().__init__(message)
        self.signal_name = signal_name
