"""TensorBoard event files without TensorFlow.

clu's ``SummaryWriter`` imports TensorFlow, which GPU and TPU images often lack. This writer uses
the ``tensorboard`` package alone (its event-file writer and protos), so ``tensorboard --logdir``
reads a run's scalars and hyperparameters wherever the run could train.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("archer_jax")


class TensorBoardWriter:
    """Scalars, texts and hyperparameters as TensorBoard events in ``logdir`` (the clu writer
    methods the training app uses: ``write_scalars``, ``write_texts``, ``write_hparams``, ``flush``,
    ``close``)."""

    def __init__(self, logdir: str | os.PathLike):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._writer = EventFileWriter(os.fspath(logdir))

    def _add(self, step: int, summary) -> None:
        self._writer.add_event(self._event(wall_time=time.time(), step=int(step), summary=summary))

    def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        values = [self._summary.Value(tag=k, simple_value=float(v)) for k, v in scalars.items()]
        self._add(step, self._summary(value=values))

    def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
        """Text summaries (TensorBoard's Text tab), one per tag."""
        from tensorboard.plugins.text.summary_v2 import text_pb

        for tag, text in texts.items():
            self._add(step, text_pb(tag, text))

    def write_hparams(self, hparams: Mapping[str, Any]) -> None:
        from tensorboard.plugins.hparams import summary_v2

        self._add(0, summary_v2.hparams_pb(dict(hparams)))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def tensorboard_writer(logdir: str | os.PathLike) -> TensorBoardWriter | None:
    """A :class:`TensorBoardWriter`, or None (after one warning line) if ``tensorboard`` is missing."""
    try:
        return TensorBoardWriter(logdir)
    except ImportError as e:
        log.warning("TensorBoard output is off: the tensorboard package cannot be imported (%s)", e)
        return None
