"""The training loop's own state: counters, metric history, evaluations and the run's seed.

It is checkpointed as JSON beside the networks and the replay buffer (the ``loop`` item), with
the same keys as the dict of archer_jax 0.1, so older checkpoints resume.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class LoopState:
    """Where the loop is: the last finished iteration, its counters and its records."""

    seed: int
    rng: list[int]  # the run's JAX key data (every phase's key is folded from it)
    agent: str = ""  # config.agent and config.env.name of the run ("" in older checkpoints)
    env: str = ""
    iteration: int = 0
    env_samples: int = 0  # transitions collected
    episodes: int = 0  # dialogues collected
    # The last iteration whose rollout is in the replay buffer: the iteration itself when collection
    # is serial, the next one when it runs one ahead (config.rollout.staleness). 0 in older checkpoints.
    collected: int = 0
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # one row of metrics per iteration
    evals: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # greedy evaluations (iteration 0: before)
    sft: dict[str, Any] | None = None  # the warm start's summary, if there was one
    critic_pretrain: dict[str, Any] | None = None  # the critic's masked-LM warm start's summary, if any
    wall_time_s: float = 0.0
    # Several processes: at each checkpoint, the digest of the parameters every host holds (they agree).
    host_digests: dict[str, str] = dataclasses.field(default_factory=dict)
    # Config changes applied on resume (archer_jax.run.config_changes): the iteration after which
    # each applied, and every changed key's [old, new] value.
    config_changes: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The checkpoint's ``loop`` item."""
        return dataclasses.asdict(self)

    def mismatches(self, config) -> list[str]:
        """``key: recorded, given`` for each of the run's seed, agent and env that ``config`` changes."""
        given = dict(seed=config.seed, agent=config.agent, env=config.env.name)
        recorded = dict(seed=self.seed, agent=self.agent, env=self.env)
        names = dict(seed="seed", agent="agent", env="env.name")
        return [f"{names[k]}: {recorded[k]!r} there, {given[k]!r} here" for k in given
                if recorded[k] not in ("", None) and recorded[k] != given[k]]

    def last_finite_iteration(self) -> int:
        """The last iteration whose learner steps were all finite (0: none, or before training)."""
        for row in reversed(self.history):
            if not nonfinite_steps(row):
                return row["iteration"]
        return 0

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> LoopState:
        """From a checkpoint's ``loop`` item."""
        return cls(**{f.name: item[f.name] for f in dataclasses.fields(cls) if f.name in item})


def nonfinite_steps(row: dict[str, Any]) -> float:
    """How many learner steps of a history row were skipped as non-finite (``*/nonfinite``)."""
    return sum(v for k, v in row.items() if k.endswith("/nonfinite"))
