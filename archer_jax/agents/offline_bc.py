"""Offline BC and offline filtered BC (OfflineArcher's baselines): behaviour cloning on a fixed
dataset of dialogues, all of it (``offline_bc``) or the transitions of its episodes whose return
is in the top ``filtered_bc_fraction`` (``offline_filtered_bc``; OfflineArcher keeps the top 10%).
The BC steps are online filtered BC's (:class:`archer_jax.agents.filtered_bc.FilteredBC`) on the
dataset instead of the replay buffer.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from archer_jax.agents import filtered_bc
from archer_jax.agents.agent import group
from archer_jax.agents.offline_archer import OfflineDataset, refuse_rollouts_ahead
from archer_jax.data.dataset_config import DatasetConfig
from archer_jax.parts_config import RolloutConfig


@dataclasses.dataclass(frozen=True)
class Config(filtered_bc.Config):
    """Filtered BC's keys (``offline_bc`` ignores the fraction: it keeps every transition)."""

    agent: ClassVar[str] = "offline_filtered_bc"
    offline_agent: ClassVar[bool] = True

    offline: DatasetConfig = group(DatasetConfig)
    rollout: RolloutConfig = group(RolloutConfig)

    def __post_init__(self):
        super().__post_init__()
        refuse_rollouts_ahead(self.rollout)


class OfflineFilteredBC(OfflineDataset, filtered_bc.FilteredBC):
    """``bc_steps`` BC steps per iteration on the dataset's best episodes."""

    name = "offline_filtered_bc"
    Config = Config


class OfflineBC(OfflineFilteredBC):
    """``bc_steps`` BC steps per iteration on the whole dataset."""

    name = "offline_bc"
    fraction = 1.0
