"""Several token sequences to a row: a batch at its real length instead of padded to its longest.

    packed = pack(rows, pad_id, max_length=256)          # host side, NumPy
    h = encoder(packed.ids, segment_ids=packed.segments, position_ids=positions(packed, offset))
    first = h[packed.starts[:, 0], packed.starts[:, 1]]    # each sequence's first token, in order

A packed row holds whole sequences one after another; ``segments`` numbers them within the row
(1, 2, ...; 0 is padding) so that attention stays inside a sequence, and ``positions`` restarts at
0 with each one, so every sequence is encoded as it would be alone in a padded batch. ``starts``
gives, for each input sequence in its input order, the (row, column) of its first token.

Rows are filled first-fit in decreasing order of length (ties in input order), so the packing is
a pure function of the lengths. The row count is rounded up to a multiple of ``row_multiple``
and the row length is the power-of-two bucket of the longest sequence, as a padded batch's, so
a run compiles a few shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from archer_jax.models.tokenizer import bucket_length


class Packed(NamedTuple):
    """Sequences packed into rows (see the module docstring)."""

    ids: np.ndarray  # [rows, length] int32
    segments: np.ndarray  # [rows, length] int32: 1, 2, ... per sequence in the row; 0 = padding
    positions: np.ndarray  # [rows, length] int32: the token's index within its sequence (0 on padding)
    starts: np.ndarray  # [sequences, 2] int32: (row, column) of each input sequence's first token

    @property
    def padding(self) -> float:
        """The fraction of the packed array's positions that hold no token."""
        return 1.0 - float((self.segments > 0).mean())


def pack(rows: Sequence[np.ndarray], pad_id: int, *, max_length: int, min_bucket: int = 16,
         row_multiple: int = 1, length: int | None = None) -> Packed:
    """``rows`` (token id sequences, each cut to its last ``max_length`` tokens, as a left
    truncation keeps the latest turns) packed first-fit decreasing into rows of the bucket length
    of the longest (or of ``length``, at least that); the row count rounded up to a multiple of
    ``row_multiple``."""
    if not len(rows):
        raise ValueError("rows is empty: nothing to pack")
    rows = [np.asarray(r, np.int32)[-max_length:] for r in rows]
    lengths = np.array([len(r) for r in rows])
    if (lengths == 0).any():
        raise ValueError(f"sequence {int(np.argmin(lengths))} is empty: every packed sequence needs a token")
    longest = bucket_length(int(lengths.max()), max_length, min(min_bucket, max_length))
    if length is not None and length < longest:
        raise ValueError(f"length {length} is shorter than the longest sequence's bucket ({longest} tokens)")
    length = longest if length is None else length
    free: list[int] = []  # each row's remaining room
    placed = np.zeros((len(rows), 2), np.int32)
    for i in sorted(range(len(rows)), key=lambda i: (-lengths[i], i)):
        row = next((r for r, room in enumerate(free) if room >= lengths[i]), None)
        if row is None:
            row = len(free)
            free.append(length)
        placed[i] = (row, length - free[row])
        free[row] -= lengths[i]
    count = -(-len(free) // row_multiple) * row_multiple
    ids = np.full((count, length), pad_id, np.int32)
    segments = np.zeros((count, length), np.int32)
    positions = np.zeros((count, length), np.int32)
    numbers = np.zeros(count, np.int32)
    for i in sorted(range(len(rows)), key=lambda i: tuple(placed[i])):  # left to right in each row
        r, c = placed[i]
        n = lengths[i]
        numbers[r] += 1
        ids[r, c:c + n] = rows[i]
        segments[r, c:c + n] = numbers[r]
        positions[r, c:c + n] = np.arange(n)
    return Packed(ids, segments, positions, placed)


def segment_mask(segments):
    """``[rows, 1, length, length]``: True where query and key are real tokens of one sequence
    (jax or NumPy arrays alike)."""
    same = segments[:, :, None] == segments[:, None, :]
    return (same & (segments[:, None, :] > 0))[:, None]
