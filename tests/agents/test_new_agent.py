"""docs/algorithms.md's recipe, "Adding an algorithm", holds: an agent written as the docs write
it (a Config, steps built on the run's networks, its declared programs, its iteration) and
registered by name trains from the command line's config like the built-in ones, and is planned
with its step of a new name, with no other file touched."""

from __future__ import annotations

import dataclasses
import json

import pytest

from archer_jax import agents
from archer_jax.agents.agent import Agent, NetworkSpec, bc_step, group
from archer_jax.agents.programs import Program
from archer_jax.config import validate
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.train_state import States
from archer_jax.plan import planner, slices
from archer_jax.train import train_and_evaluate
from tests.run.test_train_app import micro


@dataclasses.dataclass(frozen=True)
class Config:
    learner: LearnerConfig = group(LearnerConfig)
    bc_steps: int = 50


class WholeBufferBC(Agent):
    name, Config = "whole_buffer_bc", Config

    @classmethod
    def networks_for(cls, config):
        return NetworkSpec(critic=False)

    def __init__(self, parts, config):
        super().__init__(parts, config)
        self.whole_buffer_step = bc_step(self.networks, self.actor_tx)

    def programs(self, iterations):
        return [Program("whole_buffer_step", self.whole_buffer_step,
                        lambda shapes, rows: (self.abstract_actor(), shapes.bc_batch(rows)), self.config.bc_steps)]

    def learn(self, states, replay, iteration):
        actor = states.actor
        for _ in range(self.config.bc_steps):
            batch = self.parts.pipeline.policy_batch(replay.sample(self.parts.batch))
            actor, metrics = self.whole_buffer_step(actor, batch)
            self.parts.metrics.add("bc", metrics)
        return States(actor, states.critic), {"critic": 0.0, "actor": 0.0}


@pytest.mark.slow  # over 10 s on 2 cores (it trains a run): the fast tier skips it
def test_a_registered_agent_trains_from_the_config(monkeypatch, tmp_path):
    monkeypatch.setitem(agents.AGENTS, WholeBufferBC.name, WholeBufferBC)
    c = micro(agent="whole_buffer_bc", bc_steps=3, sft__steps=0)
    summary = train_and_evaluate(c, tmp_path / "run")
    assert summary["iterations"] == c.iterations and summary["agent"] == "whole_buffer_bc"
    lines = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [1, 2]
    assert all("bc/loss" in line and line["bc/loss"] > 0 for line in lines)  # its steps ran, and logged
    assert not any(key.startswith("critic/") for line in lines for key in line)  # no critic was built


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_registered_agent_s_new_step_is_planned(monkeypatch, tmp_path):
    """The plan compiles and counts the programs the agent declares, whatever their names."""
    monkeypatch.setitem(agents.AGENTS, WholeBufferBC.name, WholeBufferBC)
    c = micro(agent="whole_buffer_bc", bc_steps=3, sft__steps=0)
    planned = planner.plan_run(validate(c), slices.get("local"), tmp_path, only={"whole_buffer_step"})
    [program] = planned.programs
    assert (program.name, program.per_iteration, program.error) == ("whole_buffer_step", 3, None)
    assert program.flops > 0 and program.argument_bytes > 0
