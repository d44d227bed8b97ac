"""The plan of a run: each program of one iteration compiled for a slice (or this machine) from
abstract parts, its memory, FLOPs, bytes, roofline time and count, and the iteration's projected
time (the package docstring says what is counted and how).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import math
import re
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from archer_jax import agents
from archer_jax.agents.programs import input_shapes
from archer_jax.envs import oracle_formats
from archer_jax.learners.micro_batching import program_bytes, size_text
from archer_jax.learners.step_program import abstract
from archer_jax.model_oracle import DEFAULT_T5_BASE
from archer_jax.models import attention
from archer_jax.models.t5 import generate as t5_generate
from archer_jax.models.tokenizer import next_power_of_two
from archer_jax.plan import slices
from archer_jax.plan.abstract_parts import PlanParts, abstract_model, model_config
from archer_jax.plan.flops import matmul_flops
from archer_jax.plan.memory import device_bytes
from archer_jax.sampling import phase_decodes

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ProgramPlan:
    """One compiled program: its memory per chip, cost, roofline time and count per iteration."""

    name: str
    shape: str  # what it was compiled for (rows, lengths, micro-batches)
    per_iteration: float  # calls per iteration (averaged over the run)
    argument_bytes: int = 0
    temp_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    code_bytes: int = 0
    peak_bytes: int = 0  # with the run's other resident states
    flops: float = 0.0  # per chip, per call (loops multiplied out)
    bytes_accessed: float = 0.0
    roofline_s: float | None = None
    compile_s: float = 0.0
    fits: bool | None = None
    error: str | None = None
    collectives: dict[str, int] = dataclasses.field(default_factory=dict)  # the HLO's cross-chip ops, by kind
    kernels: int = 0  # Pallas (Mosaic) kernels in the HLO: TPU flash attention, one per attention pass
    bound: str | None = None  # what its roofline time is: "FLOPs" or "bytes" (None: no chip figures)


@dataclasses.dataclass
class Plan:
    """A run's programs on a target, and the projected iteration and run times."""

    config: str
    target: str
    chip: str | None
    hbm_bytes: int | None
    devices: int
    hosts: int
    mesh: dict
    resident_bytes: int  # per chip: the states a run keeps on device (parameters, optimizer, target)
    programs: list[ProgramPlan]
    iteration_s: float | None = None
    run_hours: float | None = None
    bound_by: str | None = None

    def not_fitting(self) -> list[ProgramPlan]:
        return [p for p in self.programs if p.fits is False]


COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def _analyse(program: ProgramPlan, compiled, chip: slices.Chip | None, resident: int, state_bytes: int,
             loops: int, matmul: float | None = None, floor_bytes: float | None = None) -> None:
    """Fills ``program`` from the compiled program. ``loops``: the trip count of the loop XLA counts
    once; ``matmul``: the program's matmul FLOPs per chip counted on its jaxpr (every loop
    multiplied out), which then stand for the FLOPs; ``floor_bytes``: the bytes it must read at
    least, which then stand for XLA's count."""
    text = compiled.as_text() or ""
    program.collectives = {op: n for op in COLLECTIVES if (n := len(re.findall(rf"\b{op}(?:-start)?\(", text)))}
    program.kernels = text.count('custom_call_target="tpu_custom_call"')
    memory = compiled.memory_analysis()
    if memory is not None:
        program.argument_bytes = int(memory.argument_size_in_bytes)
        program.temp_bytes = int(memory.temp_size_in_bytes)
        program.output_bytes = int(memory.output_size_in_bytes)
        program.alias_bytes = int(memory.alias_size_in_bytes)
        program.code_bytes = int(memory.generated_code_size_in_bytes)
        # What the program adds to its arguments (as "auto" counts it), with the states it does not take.
        program.peak_bytes = max(0, resident - state_bytes) + program.argument_bytes + program_bytes(compiled, 0)
    costs = compiled.cost_analysis()
    costs = costs[0] if isinstance(costs, list) else costs
    if costs:
        program.flops = float(costs.get("flops", 0.0)) * loops
        program.bytes_accessed = float(costs.get("bytes accessed", 0.0)) * loops
        if matmul and matmul > program.flops:  # scanned layers and micro-batches
            program.flops = matmul
    if floor_bytes is not None:
        program.bytes_accessed = floor_bytes
    if chip is not None:
        flop_s, byte_s = program.flops / chip.peak_flops, program.bytes_accessed / chip.hbm_bandwidth
        program.roofline_s = max(flop_s, byte_s)
        program.bound = "FLOPs" if flop_s >= byte_s else "bytes"
        program.fits = program.peak_bytes <= chip.hbm_bytes if memory is not None else None


def _phase_uses(agent, parts, chip, resident: int) -> list[tuple[str, int, float]]:
    """The decodes of a critic phase's a_π (drawn together, :mod:`archer_jax.sampling.phase_decodes`):
    ``(name, rows, calls an iteration)``, rows sized by the chip's memory as a run sizes them by its
    device's (on a chip of unknown free memory, one step's rows a decode)."""
    rows = agent.pi_phase_rows(parts.config.iterations)
    if not rows:
        return []
    hosts, decoder = parts.hosts, parts.decoder
    per_host, least = math.ceil(rows / hosts), math.ceil(parts.batch / hosts)
    max_rows = decoder.batch_bucket(least)
    if chip is not None:
        max_rows = phase_decodes.decode_rows(decoder, parts.config.sampling, prompt_length=parts.max_prompt_length,
                                             least=least, most=per_host, free_bytes=chip.hbm_bytes - resident)
    counts = collections.Counter(phase_decodes.decode_sizes(per_host, max_rows, least))
    return [("a_pi phase" if i == 0 else "a_pi phase rest", size * hosts, float(n))
            for i, (size, n) in enumerate(sorted(counts.items(), reverse=True))]


def plan_run(config, target: slices.Target, workdir: Path, *, config_name: str = "",
             only: set[str] | None = None) -> Plan:
    """Compiles every program of one iteration of ``config`` (validated) for ``target`` (``only``:
    the programs of these names, e.g. ``{"critic_step", "rollout"}``), traced for the target's
    platform (a TPU's attention path, not this CPU host's)."""
    devices = target.devices()
    with attention.building_for(devices[0].platform):
        return _plan_run(config, target, devices, workdir, config_name, only)


def _plan_run(config, target: slices.Target, devices, workdir: Path, config_name: str, only: set[str] | None) -> Plan:
    agent_class = agents.get(config.agent)
    agent_config = config.algorithm
    parts = PlanParts(config, devices, workdir, agent_class.networks_for(agent_config))
    agent = agent_class(parts, agent_config)
    c, chip = config, target.chip
    resident = device_bytes(agent.abstract_actor())
    if agent.critic_tx is not None:
        resident += device_bytes(agent.abstract_critic())
    programs: list[ProgramPlan] = []
    if chip is not None and resident > chip.hbm_bytes:  # nothing to compile: the states alone do not fit
        programs.append(ProgramPlan("states", "parameters, optimizer state and targets, per chip", 0,
                                    argument_bytes=resident, peak_bytes=resident, fits=False))
        return Plan(config_name, target.name, chip.name, chip.hbm_bytes, parts.mesh.devices.size, parts.hosts,
                    dict(parts.mesh.shape), resident, programs)

    # The learner steps the agent declares, micro-batched by the target's memory as a run does by its device's.
    shapes = input_shapes(parts)
    every = agent.programs(c.iterations)
    if chip is not None and target.is_tpu:  # every step (one's inputs may compile another: packed groups)
        for declaration in every:
            declaration.step.free_bytes = lambda devices: chip.hbm_bytes - resident
    declared = [p for p in every if only is None or p.name in only]
    for declaration in declared:
        name, step = declaration.name, declaration.step
        args = declaration.inputs(shapes, parts.batch)
        program = ProgramPlan(name, "", declaration.per_iteration)
        start = time.perf_counter()
        try:
            layout = step.layout(*args)
            compiled = step.compile(*args)
        except Exception as e:  # noqa: BLE001 (a step that does not fit, or that XLA refuses: reported)
            program.compile_s, program.fits, program.error = time.perf_counter() - start, False, _first_line(e)
            programs.append(program)
            continue
        program.compile_s = time.perf_counter() - start
        unit = " groups" if hasattr(args[-1], "unit") else ""  # a packed batch's micro-batches hold groups
        program.shape = (f"{parts.batch} rows in {layout.count} x {layout.size}{unit}; lengths "
                         f"{parts.max_prompt_length}/{parts.max_critic_length}/{parts.action_length}")
        matmul = matmul_flops(functools.partial(step.step, micro_batches=layout.count), *args) / parts.mesh.devices.size
        _analyse(program, compiled, chip, resident, device_bytes(args[:-1]), 1, matmul)
        programs.append(program)

    # The sampler: each host plays its share of the games on its own devices.
    sampling = c.sampling
    decoder, hosts = parts.decoder, parts.hosts
    uses = [("rollout", c.rollout_size, c.env.max_turns)]
    if c.eval_size:
        uses.append(("eval", c.eval_size, c.env.max_turns / max(c.eval_freq, 1) if c.eval_freq else 0))
    if agent.pi_decodes(c.iterations):
        uses.append(("a_pi", parts.batch, agent.pi_decodes(c.iterations)))
    uses += _phase_uses(agent, parts, chip if target.is_tpu else None, resident)
    uses = [use for use in uses if only is None or use[0] in only]
    policy_bytes = device_bytes(decoder.model_state)
    for use, games, calls in uses:
        rows = decoder.batch_bucket(math.ceil(games / hosts))
        start = time.perf_counter()
        prefill, decode = decoder.lower(sampling, rows, parts.max_prompt_length)
        # Each new token reads every parameter and the whole KV cache: the decode loop's floor (XLA
        # counts a cache update as the whole cache, several times over).
        floor = sampling.max_new_tokens * (policy_bytes + device_bytes(prefill.out_info))
        for name, lowered, loops, least in (("prefill", prefill, 1, None), ("decode", decode, sampling.max_new_tokens, floor)):
            program = ProgramPlan(f"{use} {name}", f"{rows} rows x {parts.max_prompt_length}+{sampling.max_new_tokens} "
                                  f"tokens per host", calls)
            try:
                compiled = lowered.compile()
            except Exception as e:  # noqa: BLE001 (XLA's refusal, out of memory most often: the verdict says it)
                program.compile_s, program.fits, program.error = time.perf_counter() - start, False, _first_line(e)
                programs.append(program)
                start = time.perf_counter()
                continue
            program.compile_s = time.perf_counter() - start
            start = time.perf_counter()
            _analyse(program, compiled, chip, resident, policy_bytes, loops, floor_bytes=least)
            programs.append(program)

    oracle = _oracle_program(c, parts, chip, resident, workdir, only)
    if oracle is not None:
        programs.append(oracle)

    plan = Plan(config_name, target.name, chip.name if chip else None, chip.hbm_bytes if chip else None,
                parts.mesh.devices.size, parts.hosts, dict(parts.mesh.shape), resident, programs)
    if chip is not None and all(p.roofline_s is not None for p in programs):
        times = {p.name: p.per_iteration * p.roofline_s for p in programs}
        plan.iteration_s = sum(times.values())
        plan.bound_by = max(times, key=times.get)
        plan.run_hours = plan.iteration_s * c.iterations / 3600
    return plan


ORACLE_PROMPT = 64  # tokens: the official oracle prompts ("The object is ...", a question) fit in this bucket


def _oracle_program(c, parts: PlanParts, chip, resident: int, workdir: Path, only) -> ProgramPlan | None:
    """The T5 oracle's greedy decode (``env.options.oracle=t5:PATH``): each host's env answers its
    games' questions of a turn in one batch, on the host's first device."""
    spec = c.env.options.get("oracle", oracle_formats.EMBEDDED)
    if spec == oracle_formats.EMBEDDED or (only is not None and "oracle" not in only):
        return None
    kind, path = oracle_formats.parse(spec, c.env.name)
    if kind != "t5":  # lm:PATH answers through the project's sampler, whose programs are the policy's kind
        return None
    file = Path(path).expanduser()
    shape = model_config(path if (file / "config.json").is_file() else DEFAULT_T5_BASE, workdir)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: abstract_model(shape, ("t5",), dtype=jnp.float32,
                                                                         param_dtype=jnp.float32, remat="none", seed=0)))
    device = jax.sharding.SingleDeviceSharding(parts.host_mesh.devices.flat[0])
    state = abstract(state, device)
    rows = max(8, next_power_of_two(math.ceil(c.rollout_size / parts.hosts)))
    ids = jax.ShapeDtypeStruct((rows, ORACLE_PROMPT), jnp.int32, sharding=device)
    new_tokens = oracle_formats.FORMATS[(kind, c.env.name)].max_new_tokens
    program = ProgramPlan("oracle decode", f"{rows} rows x {ORACLE_PROMPT}+{new_tokens} tokens per host", c.env.max_turns)
    start = time.perf_counter()
    compiled = t5_generate._greedy.lower(graphdef, state, ids, ids, new_tokens).compile()
    program.compile_s = time.perf_counter() - start
    matmul = matmul_flops(functools.partial(t5_generate._greedy, graphdef, max_new_tokens=new_tokens), state, ids, ids)
    _analyse(program, compiled, chip, resident, 0, 1, matmul)
    return program


def table(plan: Plan) -> str:
    """The plan as a text table, with the iteration's projection under it."""
    hbm = f" of {size_text(plan.hbm_bytes)} HBM" if plan.hbm_bytes else ""
    lines = [f"{plan.config} on {plan.target} ({plan.chip or 'device figures unknown'}{hbm} per chip; "
             f"{plan.devices} chips, {plan.hosts} host{'s' if plan.hosts > 1 else ''}; mesh "
             + " ".join(f"{k}={v}" for k, v in plan.mesh.items()) + f"); resident states {size_text(plan.resident_bytes)} per chip",
             f"{'program':<16} {'args':>10} {'temp':>10} {'peak':>10} {'fits':>5} {'GFLOP':>9} {'GB':>8} "
             f"{'roofline':>10} {'bound':>5} {'collectives':>14} {'x/iter':>7} {'compile':>8}  shape"]
    for p in plan.programs:
        fits = {True: "yes", False: "NO", None: "?"}[p.fits]
        roof = f"{p.roofline_s * 1e3:.2f} ms" if p.roofline_s is not None else "-"
        lines.append(f"{p.name:<16} {size_text(p.argument_bytes):>10} {size_text(p.temp_bytes):>10} "
                     f"{size_text(p.peak_bytes):>10} {fits:>5} {p.flops / 1e9:>9.1f} {p.bytes_accessed / 1e9:>8.2f} "
                     f"{roof:>10} {p.bound or '-':>5} {collectives_text(p.collectives):>14} {p.per_iteration:>7.2f} "
                     f"{p.compile_s:>7.1f}s  {p.error or p.shape}")
    if plan.iteration_s is not None:
        lines.append(f"planned iteration (roofline, a lower bound): {plan.iteration_s:.2f} s, bound by {plan.bound_by}; "
                     f"the run: {plan.run_hours:.1f} h")
    return "\n".join(lines)


COLLECTIVE_ABBREVIATIONS = {"all-reduce": "AR", "all-gather": "AG", "reduce-scatter": "RS", "all-to-all": "A2A",
                            "collective-permute": "CP"}


def collectives_text(collectives: dict[str, int]) -> str:
    """A program's collectives for the table, e.g. "8 AR, 2 AG" ("-": none)."""
    return ", ".join(f"{n} {COLLECTIVE_ABBREVIATIONS[op]}" for op, n in collectives.items()) or "-"


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _out_of_memory(error: str) -> bool:
    """Whether XLA's refusal is a program that does not fit in the chip's memory."""
    return any(mark in error for mark in ("RESOURCE_EXHAUSTED", "Ran out of memory", "exceeds available HBM",
                                          "Exceeded hbm capacity"))


SAMPLER_ADVICE = ("fewer games per host (config.rollout_size, config.eval_size), fewer new tokens "
                  "(config.sampling.max_new_tokens), or shard the policy (config.mesh.fsdp=-1, config.mesh.tensor)")
LEARNER_ADVICE = ("set config.model.remat=full, a smaller config.learner.micro_batch_size, or shard more "
                  "(config.mesh.fsdp=-1, config.mesh.tensor)")


def not_fitting_line(plan: Plan) -> str | None:
    """The one-line error of a plan with a program that does not fit (None: everything fits)."""
    bad = plan.not_fitting()
    if not bad:
        return None
    p = bad[0]
    sampler = p.name.endswith((" prefill", " decode"))
    if p.error and _out_of_memory(p.error):
        hbm = f"{size_text(plan.hbm_bytes)} of HBM per chip" if plan.hbm_bytes else "memory"
        return (f"error: {p.name} does not fit in {plan.target}'s {hbm} (XLA: {p.error[:200]}): "
                f"{SAMPLER_ADVICE if sampler else LEARNER_ADVICE}")
    if p.error:
        return f"error: {p.name} does not compile for {plan.target}: {p.error}"
    if p.name == "states":
        return (f"error: the run's states need {size_text(p.peak_bytes)} per chip on {plan.target}, which has "
                f"{size_text(plan.hbm_bytes)}: shard them over more chips (config.mesh.fsdp=-1 on a larger slice) "
                f"or train LoRA adapters (config.model.lora.rank)")
    return (f"error: {p.name} needs {size_text(p.peak_bytes)} per chip on {plan.target}, which has "
            f"{size_text(plan.hbm_bytes)}: {SAMPLER_ADVICE if sampler else LEARNER_ADVICE}")
