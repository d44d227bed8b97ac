"""Micro-batching by memory: every layout gives the same step, "auto" takes the largest that fits
the (here: simulated) free memory, from the compiled program's memory analysis."""

import logging

import jax
import pytest

from archer_jax import learners
from archer_jax.agents.steps import Steps
from archer_jax.errors import TrainingError
from archer_jax.learners import micro_batching, step_program
from archer_jax.learners.micro_batching import candidate_sizes, parse_micro_batch_size, program_bytes
from tests.learners.conftest import actor_batch, critic_batch, make_modules
from tests.learners.test_learner import as_numpy, max_rel_err

CONFIG = learners.LearnerConfig(critic_lr=1e-4, actor_lr=1e-4, actor_loss="actor_token_baseline")


def test_sizes_and_settings():
    assert candidate_sizes(16) == [16, 8, 4, 2, 1]
    assert candidate_sizes(24, multiple=4) == [24, 12, 8, 4]
    assert candidate_sizes(6, multiple=8) == []
    assert parse_micro_batch_size("auto") is None
    assert parse_micro_batch_size("8") == parse_micro_batch_size(8) == 8
    for bad in (0, -2, "eight", 2.0, True):
        with pytest.raises(ValueError, match="micro_batch_size must be 'auto' or a positive integer"):
            parse_micro_batch_size(bad)
    with pytest.raises(ValueError, match="micro_batch_size: must be"):
        learners.LearnerConfig(micro_batch_size="big")


def steps(tiny_dirs, tokenizers, micro_batch_size):
    """One critic, actor (token baseline) and BC step on 16 transitions, cut in ``micro_batch_size``."""
    config = learners.LearnerConfig(**{**CONFIG.__dict__, "micro_batch_size": micro_batch_size})
    learner = Steps(*make_modules(tiny_dirs, token_baseline=True), config)
    critic, cm = learner.critic_step(learner.init_critic(), critic_batch(tokenizers, n=16))
    actor, am = learner.actor_step(learner.init_actor(), critic.params, actor_batch(tokenizers, n=16))
    batch = actor_batch(tokenizers, n=16, seed=1)
    bc, bm = learner.bc_step(learner.init_actor(), learners.BCBatch(batch.observation, batch.action))
    layouts = {name: [(x.size, x.count) for x in program.layouts.values()] for name, program in learner.programs().items()
               if program.layouts}  # the steps that ran
    return as_numpy((critic.params, critic.target, actor.params, bc.params)), as_numpy((cm, am, bm)), layouts


@pytest.fixture(scope="module")
def whole(tiny_dirs, tokenizers):
    return steps(tiny_dirs, tokenizers, "auto")


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
@pytest.mark.parametrize("size", [4])
def test_every_layout_gives_the_same_step(size, tiny_dirs, tokenizers, whole):
    """The step's loss, metrics and update do not depend on the micro-batch layout: the token
    baseline's mean runs over the step's tokens, not each micro-batch's."""
    params, metrics, layouts = whole
    assert layouts == {name: [(16, 1)] for name in ("critic_step", "actor_step", "bc_step")}  # auto: it all fits
    ours, our_metrics, our_layouts = steps(tiny_dirs, tokenizers, size)
    assert our_layouts == {name: [(size, 16 // size)] for name in ("critic_step", "actor_step", "bc_step")}
    assert max_rel_err(ours, params) < 1e-6
    for step, (a, b) in enumerate(zip(our_metrics, metrics)):
        for name in b:
            # A std's rounding error follows its values' scale, not its own (values ~0.05 apart by
            # ~1e-8 give a std of 3e-4 that moves by ~1e-8): compare it at its values' scale.
            stats = [b[name.replace("/std", f"/{s}")] for s in ("mean", "min", "max")] if name.endswith("/std") else []
            scale = max([abs(b[name]), *map(abs, stats), 1e-3])
            assert abs(a[name] - b[name]) <= 1e-5 * scale, (step, name, a[name], b[name])
    assert metrics[1]["baseline_loss"] > 0 and metrics[2]["token_nll"] > 0


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_auto_takes_the_largest_micro_batch_that_fits(tiny_dirs, tokenizers, monkeypatch, caplog):
    learner = Steps(*make_modules(tiny_dirs), learners.LearnerConfig(micro_batch_size=16))
    state = learner.init_actor()
    batch = actor_batch(tokenizers, n=16)
    batch = learners.BCBatch(batch.observation, batch.action)
    program = learner.programs()["bc_step"]
    batch_bytes = sum(x.nbytes for x in jax.tree.leaves(batch))
    need = {16 // count: program_bytes(program.lower(state, batch, count=count).compile(), batch_bytes)
            for count in (1, 2, 16)}
    assert need[16] > need[8] > need[1] > 0  # activations grow with the micro-batch

    def auto_with(free: float):
        monkeypatch.setattr(step_program, "device_free_bytes", lambda devices: int(free))
        auto = Steps(*make_modules(tiny_dirs), learners.LearnerConfig(micro_batch_size="auto"))
        return auto, auto.init_actor()

    auto, fresh = auto_with((need[8] + need[16]) / 2 / micro_batching.HEADROOM)
    new, metrics = auto.bc_step(fresh, batch)
    (layout,) = auto.programs()["bc_step"].layouts.values()
    assert (layout.size, layout.count, layout.need_bytes) == (8, 2, need[8])
    fixed = Steps(*make_modules(tiny_dirs), learners.LearnerConfig(micro_batch_size=8))
    reference, reference_metrics = fixed.bc_step(fixed.init_actor(), batch)
    assert max_rel_err(as_numpy(new.params), as_numpy(reference.params)) == 0  # the same program ran
    assert float(metrics["loss"]) == float(reference_metrics["loss"])

    # A GPU's or TPU's own limit refuses a step whose smallest micro-batch does not fit ...
    monkeypatch.setattr(step_program, "shares_host_memory", lambda devices: False)
    auto, fresh = auto_with(need[1] / 2)
    with pytest.raises(TrainingError, match=r"^bc_step: micro-batches of 1 transitions \(lengths .*\) need [0-9.]+ MiB "
                                            r"per device, [0-9.]+ MiB free: set config.model.remat"):
        auto.bc_step(fresh, batch)
    # ... while CPU devices, whose free memory is the host's moment-to-moment reading, run the smallest.
    monkeypatch.setattr(step_program, "shares_host_memory", lambda devices: True)
    auto, fresh = auto_with(need[1] / 2)
    with caplog.at_level(logging.WARNING, logger=step_program.__name__):
        auto.bc_step(fresh, batch)
    assert [(x.size, x.count) for x in auto.programs()["bc_step"].layouts.values()] == [(1, 16)]
    assert "bc_step: micro-batches of 1 transitions" in caplog.text and "running them anyway" in caplog.text


def test_only_cpu_devices_share_the_hosts_memory():
    assert micro_batching.shares_host_memory(jax.local_devices()) == (jax.local_devices()[0].platform == "cpu")


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_auto_stays_within_its_limit(tiny_dirs, tokenizers):
    """On CPUs the run caps "auto" at the config's batch_size (larger micro-batches ran slower there)."""
    assert micro_batching.auto_limit("cpu", 8) == 8 and micro_batching.auto_limit("gpu", 8) is None
    learner = Steps(*make_modules(tiny_dirs), learners.LearnerConfig(), micro_batch_limit=4)
    learner.critic_step(learner.init_critic(), critic_batch(tokenizers, n=16))
    assert [(x.size, x.count) for x in learner.programs()["critic_step"].layouts.values()] == [(4, 4)]


def test_free_memory_is_read_from_the_devices():
    free = micro_batching.device_free_bytes(jax.local_devices())
    assert free is not None and free > 0
    stats = jax.local_devices()[0].memory_stats()
    if stats and "bytes_limit" in stats:  # GPU / TPU: the allocator's own figures
        assert free <= stats["bytes_limit"]
    else:  # CPU devices share the host's available memory
        assert free * len(jax.local_devices()) <= micro_batching._host_available_bytes() * 1.5


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_a_fixed_micro_batch_must_cut_the_batch(tiny_dirs, tokenizers):
    learner = Steps(*make_modules(tiny_dirs), learners.LearnerConfig(micro_batch_size=5))
    with pytest.raises(ValueError, match=r"learner.micro_batch_size 5 does not cut a batch of 16 .* try one of \[16, 8, 4, 2, 1\]"):
        learner.critic_step(learner.init_critic(), critic_batch(tokenizers, n=16))
    larger = Steps(*make_modules(tiny_dirs), learners.LearnerConfig(micro_batch_size=64))
    larger.critic_step(larger.init_critic(), critic_batch(tokenizers, n=16))  # one micro-batch of the whole step
    assert [(x.size, x.count) for x in larger.programs()["critic_step"].layouts.values()] == [(16, 1)]


def test_a_size_the_compiler_refuses_for_memory_counts_as_not_fitting(monkeypatch):
    # A TPU compiler refuses a program that cannot fit its HBM instead of reporting its memory; "auto"
    # reads the refusal as "too large" and takes the largest size that fits. Fake programs whose
    # temporaries are 1 GiB per transition; the whole batch of 16 is refused.
    from types import SimpleNamespace

    import numpy as np

    from archer_jax.runtime import sharding

    refusal = ("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. the total memory required for HLO "
               "temporaries (17.48G) exceeds available HBM (15.75G).")

    class Lowered:
        def __init__(self, count):
            self.count = count

        def compile(self):
            if self.count == 1:
                raise jax.errors.JaxRuntimeError(refusal)
            memory = SimpleNamespace(temp_size_in_bytes=(16 // self.count) * 2**30, output_size_in_bytes=0,
                                     alias_size_in_bytes=0, generated_code_size_in_bytes=0)
            return SimpleNamespace(memory_analysis=lambda: memory)

    program = step_program.StepProgram(lambda *a, **k: None, None, None, mesh=sharding.single_device_mesh(),
                                       free_bytes=lambda devices: 10 * 2**30)
    monkeypatch.setattr(program, "lower", lambda *args, count: Lowered(count))
    batch = np.zeros((16, 4), np.float32)
    layout = program.layout(None, batch)
    assert (layout.size, layout.count, layout.need_bytes) == (8, 2, 8 * 2**30 + batch.nbytes)
    assert micro_batching.exhausted_bytes(refusal, 0) == int(17.48 * 2**30)
    assert micro_batching.exhausted_bytes("INTERNAL: something else", 0) is None
