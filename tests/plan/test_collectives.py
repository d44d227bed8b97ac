"""On a data mesh of this machine's 8 CPU devices (tests/conftest.py), the compiled learner steps
cross devices only to sum (the gradients and the metrics' means), and the sampler only to ask
whether any row is still decoding: what the TPU plan (tests/plan/test_plan.py) asserts for v5e."""

import jax
import pytest

from archer_jax.config import validate
from archer_jax.plan import slices
from archer_jax.plan.planner import plan_run
from tests.run.test_train_app import micro

pytestmark = pytest.mark.slow  # compiles learner and sampler programs


def test_a_data_mesh_of_cpu_devices_only_sums_across_them(tmp_path):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    plan = plan_run(validate(micro(batch_size=8, mesh__data=8)), slices.get("local"), tmp_path,
                    only={"critic_step", "actor_step", "rollout"})
    programs = {p.name: p for p in plan.programs}
    assert plan.mesh["data"] == 8
    for name in ("critic_step", "actor_step"):
        assert set(programs[name].collectives) == {"all-reduce"}, (name, programs[name].collectives)
    assert not programs["rollout prefill"].collectives
    assert set(programs["rollout decode"].collectives) <= {"all-reduce"}
