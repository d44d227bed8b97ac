"""The plan compiles a run's programs for TPU slices on this CPU (libtpu's compiler, no TPU):
single- and multi-host topologies, data / fsdp / tensor meshes, with the memory and cost fields
filled and the collectives each mesh implies in the compiled programs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from archer_jax.plan import slices
from archer_jax.config import validate
from archer_jax.models import build_tiny
from archer_jax.plan.planner import not_fitting_line, plan_run
from tests.run.test_train_app import ROOT, micro

pytestmark = pytest.mark.slow
libtpu = pytest.importorskip("libtpu", reason="the tpu extra (libtpu) compiles for TPU slices")


def planned(tmp_path_factory, target: str, only=None, **overrides):
    config = micro(**overrides)
    return plan_run(validate(config), slices.get(target), tmp_path_factory.mktemp("plan"), only=only)


@pytest.fixture(scope="module")
def data_v5e(tmp_path_factory):
    """Every program of the micro run on v5litepod-8, the batch split over 8 chips, with a T5 oracle."""
    oracle = build_tiny("t5", tmp_path_factory.mktemp("oracle") / "t5")
    return planned(tmp_path_factory, "v5litepod-8", batch_size=8, env__workers=0, env__options__oracle=f"t5:{oracle}")


def by_name(plan):
    return {p.name: p for p in plan.programs}


def test_every_program_of_an_iteration_compiles_for_a_single_host_slice(data_v5e):
    programs = by_name(data_v5e)
    assert {"critic_step", "actor_step", "rollout prefill", "rollout decode", "a_pi decode", "oracle decode"} <= set(programs)
    assert data_v5e.devices == 8 and data_v5e.hosts == 1 and data_v5e.mesh == {"data": 8, "fsdp": 1, "tensor": 1}
    assert data_v5e.chip == "TPU v5e" and data_v5e.hbm_bytes == 16 * 2**30
    # The critic phase's a_π (2 steps of 8 rows) in one decode of all 16, which fits; the actor
    # steps' a_π one step's 8 rows a decode.
    phase = {name: p for name, p in programs.items() if name.startswith("a_pi phase")}
    assert set(phase) == {"a_pi phase prefill", "a_pi phase decode"}
    assert phase["a_pi phase decode"].shape.startswith("16 rows") and phase["a_pi phase decode"].per_iteration == 1
    assert programs["a_pi decode"].shape.startswith("8 rows") and programs["a_pi decode"].per_iteration < 2
    for p in data_v5e.programs:
        assert p.argument_bytes > 0 and p.peak_bytes >= p.argument_bytes and p.fits, p
        assert p.flops > 0 and p.bytes_accessed > 0 and p.roofline_s > 0, p
    # Data parallelism: the gradients are summed over the chips (with the metrics' means), and that
    # is all that crosses chips; the sampler needs no collective beyond the decode loop's "is any
    # row still going" (each chip decodes its share). Nothing is gathered or moved between chips:
    # not the CPU host's attention blocks, not the critic's s and s' rows.
    assert programs["critic_step"].collectives.get("all-reduce", 0) > 0
    assert programs["actor_step"].collectives.get("all-reduce", 0) > 0
    for p in data_v5e.programs:
        assert set(p.collectives) <= {"all-reduce"}, (p.name, p.collectives)
        if "prefill" in p.name:
            assert not p.collectives, (p.name, p.collectives)
    # Attention in the learner steps runs in the Pallas flash kernel (the micro preset's 256-token
    # buckets), run per chip: the data mesh still moves nothing but the gradients' sum (above).
    assert programs["critic_step"].kernels > 0 and programs["actor_step"].kernels > 0
    assert programs["rollout decode"].kernels == 0  # a decode step attends over its cache: XLA's path
    assert programs["rollout decode"].bound == "bytes"  # one token a row: the weights' and cache's bytes
    # The decode loop's cost is XLA's count of one step times the new tokens.
    assert programs["rollout decode"].flops > programs["rollout prefill"].flops / 64
    assert data_v5e.iteration_s > 0 and data_v5e.bound_by in programs
    assert not_fitting_line(data_v5e) is None


def test_fsdp_on_a_multi_host_slice_gathers_the_weights_and_scatters_the_gradients(tmp_path_factory):
    plan = planned(tmp_path_factory, "v4-32", only={"critic_step", "rollout"}, batch_size=16,
                   mesh__data=1, mesh__fsdp=-1)
    assert plan.devices == 16 and plan.hosts == 4 and plan.mesh["fsdp"] == 16
    step = by_name(plan)["critic_step"]
    assert step.collectives.get("all-gather", 0) > 0, step.collectives
    assert step.collectives.get("reduce-scatter", 0) + step.collectives.get("all-reduce", 0) > 0, step.collectives
    # Each host's sampler plays its share of the games on its own 4 chips.
    assert by_name(plan)["rollout decode"].shape.startswith("4 rows")


def test_tensor_parallel_layers_reduce_their_partial_sums(tmp_path_factory):
    plan = planned(tmp_path_factory, "v5litepod-8", only={"actor_step"}, batch_size=8, mesh__data=2, mesh__tensor=4)
    assert plan.mesh == {"data": 2, "fsdp": 1, "tensor": 4}
    assert by_name(plan)["actor_step"].collectives.get("all-reduce", 0) > 0


def test_a_plan_that_does_not_fit_ends_with_one_line(tmp_path):
    # The 7B policy trained whole (no LoRA) on one v5e chip: its weights and Adam moments alone are
    # over twice the chip's memory. Shapes only: nothing is downloaded or compiled.
    out = tmp_path / "plan.json"
    done = subprocess.run([sys.executable, "-m", "archer_jax.plan", f"--config={ROOT}/configs/20q_llm.py",
                           "--target=v5litepod-1", f"--json={out}", "--config.model.lora.rank=0"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert "v5litepod-1" in lines[0] and "per chip" in lines[0], lines[0]
    plan = json.loads(out.read_text())
    assert plan["target"] == "v5litepod-1" and plan["resident_bytes"] > 2.5 * plan["hbm_bytes"]
    # 7.24e9 bfloat16 parameters and two moments (43 GB), and the RoBERTa-base critic with its target and Adam (2 GB).
    assert 44e9 < plan["resident_bytes"] < 47e9
    assert [p["fits"] for p in plan["programs"]] == [False]


def test_auto_packs_more_groups_a_chip_when_one_does_not_fit(tmp_path):
    """With micro_batch_size="auto" on a TPU, a packed critic batch is one group a chip, cut into
    more groups (2, 4, ...) when a micro-batch of one group a chip does not fit: here 16
    transitions on 8 chips, in a budget that holds a micro-batch of one transition a chip but not
    of two."""
    from archer_jax import agents
    from archer_jax.agents import archer
    from archer_jax.agents.programs import input_shapes
    from archer_jax.learners.micro_batching import HEADROOM, program_bytes
    from archer_jax.models import attention
    from archer_jax.plan.abstract_parts import PlanParts

    config = validate(micro(batch_size=16, env__workers=0), weights=False)
    devices = slices.get("v5litepod-8").devices()

    cls = agents.get(config.agent)
    with attention.building_for("tpu"):
        probe = cls(PlanParts(config, devices, tmp_path, cls.networks_for(config.algorithm)), config.algorithm)
        shapes = input_shapes(probe.parts)
        need = {factor: program_bytes(probe.critic_step.lower(probe.abstract_critic(), shapes.packed_critic_batch(
            16, 8 * factor), count=factor).compile(), 0) for factor in (1, 2)}  # micro-batches of one group a chip
        assert need[2] < need[1]
        probe.critic_step.free_bytes = lambda _: int((need[1] + need[2]) / 2 / HEADROOM)  # (compiled above: reused)
        assert archer.critic_groups(probe, 16) == 16  # 2 groups a chip, of 1 transition each
        layout = probe.critic_step.layout(probe.abstract_critic(), shapes.packed_critic_batch(16, 16))
        assert (layout.count, layout.size) == (2, 8)  # in micro-batches of one group a chip
        probe.critic_step.free_bytes = lambda _: 1
        assert archer.critic_groups(probe, 16) == 16  # decided once
