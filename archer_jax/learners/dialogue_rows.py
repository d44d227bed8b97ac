"""PPO's token layout: the transitions of each dialogue as one row of tokens, turn after turn.

    rows = DialogueRows.of(episodes, action_lengths)
    per_row = rows.to_rows(values)       # [transitions, action_len] -> [dialogues, tokens]
    rewards = rows.ends(turn_rewards)    # each turn's value at its last token
    back = rows.from_rows(advantages, action_len)

Token-level estimators (:mod:`archer_jax.learners.ppo_estimators`) read whole dialogues: a turn's
reward sits at its utterance's last token, and discounting runs across turns.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from archer_jax.models.tokenizer import next_power_of_two


class DialogueRows(NamedTuple):
    """Where each transition's action tokens sit in its dialogue's row (:class:`TokenRows`)."""

    row: np.ndarray  # [transitions] the dialogue's row
    start: np.ndarray  # [transitions] the offset of the utterance's first token in the row
    lengths: np.ndarray  # [transitions] action tokens
    shape: tuple[int, int]  # (dialogues, tokens per row: a power of two)

    @classmethod
    def of(cls, episodes: np.ndarray, lengths: np.ndarray) -> DialogueRows:
        """``episodes``: each transition's dialogue number, grouped and in turn order."""
        _, row = np.unique(episodes, return_inverse=True)
        ends = np.cumsum(lengths)
        row_start = np.zeros(row.max() + 1, np.int64)
        firsts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        row_start[row[firsts]] = ends[firsts] - lengths[firsts]
        start = ends - lengths - row_start[row]
        width = next_power_of_two(int((start + lengths).max()))
        return cls(row, start, lengths, (int(row.max()) + 1, width))

    def _flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        transition = np.repeat(np.arange(len(self.lengths)), self.lengths)
        token = np.arange(len(transition)) - np.repeat(np.cumsum(self.lengths) - self.lengths, self.lengths)
        return transition, token, self.row[transition], self.start[transition] + token

    def to_rows(self, per_token: np.ndarray) -> np.ndarray:
        """``[transitions, action_len]`` to ``[dialogues, tokens]`` (0 elsewhere)."""
        transition, token, row, col = self._flat()
        out = np.zeros(self.shape, np.float32)
        out[row, col] = per_token[transition, token]
        return out

    def ends(self, per_turn: np.ndarray) -> np.ndarray:
        """``[transitions]`` values placed at each utterance's last token of its row."""
        out = np.zeros(self.shape, np.float32)
        keep = self.lengths > 0
        out[self.row[keep], (self.start + self.lengths - 1)[keep]] = per_turn[keep]
        return out

    def from_rows(self, rows: np.ndarray, action_len: int) -> np.ndarray:
        """``[dialogues, tokens]`` back to ``[transitions, action_len]``."""
        transition, token, row, col = self._flat()
        out = np.zeros((len(self.lengths), action_len), np.float32)
        out[transition, token] = np.asarray(rows)[row, col]
        return out
