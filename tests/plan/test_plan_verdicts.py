"""The plan's verdicts without compiling for a slice: XLA's refusals (out of memory most often) as
one line naming the program, the chip's memory and what to change; ``--json`` checked before any
work; a sampler program that XLA refuses reported, not raised."""

from __future__ import annotations

import pytest

from archer_jax.plan import planner as plan_lib, slices
from archer_jax.config import validate
from archer_jax.errors import ConfigError
from archer_jax.plan.command import check_json_path
from archer_jax.plan.planner import Plan, ProgramPlan, not_fitting_line
from tests.run.test_train_app import micro

OOM = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 16.74G of "
       "15.75G hbm. Exceeded hbm capacity by 1006.31M.")


def _plan(*programs: ProgramPlan) -> Plan:
    return Plan("configs/20q_llm.py", "v5litepod-1", "TPU v5 lite", 16 * 2**30, 1, 1, {"data": 1}, 2**30, list(programs))


@pytest.mark.parametrize("name, advice", [("rollout decode", plan_lib.SAMPLER_ADVICE),
                                          ("critic_step", plan_lib.LEARNER_ADVICE)])
def test_a_program_out_of_memory_is_one_verdict_line_with_what_to_change(name, advice):
    fits = ProgramPlan("rollout prefill", "", 1, fits=True)
    line = not_fitting_line(_plan(fits, ProgramPlan(name, "", 1, fits=False, error=OOM)))
    assert line == (f"error: {name} does not fit in v5litepod-1's 16.00 GiB of HBM per chip (XLA: {OOM}): {advice}")


def test_another_refusal_keeps_xla_s_line():
    line = not_fitting_line(_plan(ProgramPlan("actor_step", "", 1, fits=False, error="INVALID_ARGUMENT: bad sharding")))
    assert line == "error: actor_step does not compile for v5litepod-1: INVALID_ARGUMENT: bad sharding"


def test_the_json_path_is_checked_first(tmp_path):
    check_json_path(tmp_path / "plan.json")
    with pytest.raises(ConfigError, match=r"^--json: .* is a directory; give a file path, e.g. --json=.*/plan.json$"):
        check_json_path(tmp_path)
    with pytest.raises(ConfigError, match=r"^--json: .*/missing is not a directory$"):
        check_json_path(tmp_path / "missing" / "plan.json")


def test_a_sampler_program_xla_refuses_is_reported_not_raised(tmp_path, monkeypatch):
    import jax

    def refuse(self, *args, **kwargs):
        raise RuntimeError(OOM + "\nmore of XLA's lines")

    monkeypatch.setattr(jax.stages.Lowered, "compile", refuse)
    config = validate(micro())
    planned = plan_lib.plan_run(config, slices.get("local"), tmp_path, only={"rollout"})
    assert [(p.name, p.fits, p.error) for p in planned.programs] == [("rollout prefill", False, OOM),
                                                                     ("rollout decode", False, OOM)]
    assert not_fitting_line(planned).startswith("error: rollout prefill does not fit in local's ")


def test_the_table_gives_each_programs_bound_and_collectives():
    step = ProgramPlan("critic_step", "256 rows", 50, roofline_s=0.1, bound="FLOPs",
                       collectives={"all-reduce": 8, "all-gather": 2})
    decode = ProgramPlan("rollout decode", "128 rows", 20, roofline_s=0.03, bound="bytes")
    header, *rows = plan_lib.table(_plan(step, decode)).splitlines()[1:]
    assert "bound" in header and "collectives" in header
    assert "FLOPs" in rows[0] and "8 AR, 2 AG" in rows[0]
    assert "bytes" in rows[1] and " - " in rows[1]
