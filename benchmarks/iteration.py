"""One ArCHer iteration, archer_jax vs the PyTorch reference, in one process on one machine.

Both sides run the workload of :mod:`workload` (same model sizes, shapes, counts and random
inputs; random weights, nothing downloaded). Its learner rows follow the real length
distribution of a replay of the game (``--lengths real``, the default: a transition of turn t
observes the prompt of turn t, utterances of 6 to 16 tokens; ``base`` at the paper's 20-turn
lengths), or are all ``observation`` tokens long (``--lengths fixed``, the workload of earlier
results):

  * ours: :class:`archer_jax.sampling.Sampler` for rollouts, the critic phase's ``a_π`` drawn
    together as a run draws them (``--per-step-a-pi``: one call per step, as earlier results),
    each actor step's ``a_π``, and the jitted critic and actor steps (micro-batches by memory, or
    ``--micro-batch-size``, in one program) on batches laid out as a run lays them out: at real
    lengths packed several sequences to a row (``--padded``: each field padded to its batch's
    longest), at fixed lengths the arrays as they are;
  * reference: :mod:`reference_torch`, the official code's structure (HF ``generate`` per turn and
    per micro-batch, each micro-batch padded to its longest row, eager forward/backward per
    micro-batch, ``torch.optim.Adam``).

Each side first runs a warm-up (ours: a whole iteration, which compiles every program; the
compile time is reported), then ``--repeats`` timed rounds of one iteration of ours followed by
one of the reference (medians; interleaved, so that a machine whose speed drifts slows both
sides alike; each round's full-iteration ratio is kept in the JSON). The table gives, per
size, rollout tokens/s, the critic step, the actor step and the full iteration, and the ratio
(reference time / ours). With a known peak (GPU/TPU table in common.py, or ``--peak-flops``) it
adds the MFU of our critic and actor programs (their useful FLOPs: at real lengths each row's
own tokens) and, with a known bandwidth, the decode step's fraction of the memory-bandwidth roofline; at real
lengths it gives the learner batches' padding fractions; every size reports its compile time,
peak device memory (where the device reports it) and the hours ``--iterations`` such iterations
would take.

    python benchmarks/iteration.py                      # tiny and base, CPU: a few minutes
    python benchmarks/iteration.py --sizes tiny --profile /tmp/trace
    python benchmarks/iteration.py --sizes base --padded --per-step-a-pi --no-reference   # the earlier layout
    python benchmarks/iteration.py --workload paper --dtype bfloat16 --tag gpu_h100   # on an accelerator
Prints the table; writes benchmarks/results/iteration_<backend>.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax import learners, models
from archer_jax.agents.steps import Steps
from archer_jax.learners import micro_batching
from archer_jax.learners.batches import actor_batch, critic_batch
from archer_jax.learners.packed_batches import (PackedActorBatch, PackedCriticBatch, group_count, packed_actor_batch,
                                                packed_critic_batch)
from archer_jax.models.tokenizer import pad_rows
from archer_jax.models import tiny
from archer_jax.runtime import sharding
from archer_jax.sampling import Sampler, SamplingParams, phase_decodes
from common import RESULTS, decode_floor_s, machine, peak_bandwidth, peak_flops, print_table, write_result
from workload import (REAL_LENGTHS, Data, Workload, make_data, phase_times, real_step_flops, row_limit, step_flops,
                      to_critic_ids, workloads)


def _tokens(ids: np.ndarray) -> learners.Tokens:
    return learners.Tokens(ids, np.ones_like(ids))


CRITIC_PAD = types.SimpleNamespace(pad_token_id=1, padding_side="right")  # RoBERTa's pad id, as a run pads


def critic_pi_rows(pi: np.ndarray, lengths: np.ndarray, critic_vocab: int) -> list[np.ndarray]:
    """a_π's critic rows at real lengths: <s>, the first ``lengths[i]`` sampled ids, </s>."""
    return [np.array([0, *to_critic_ids(p[:k], critic_vocab), 2], np.int32) for p, k in zip(pi, lengths)]


def padding_fraction(rows: list, real: int) -> float:
    """The share of a batch's positions (its token rows, ``rows``) that hold none of its ``real`` tokens."""
    return 1 - real / sum(int(np.asarray(r).size) for r in rows)


class JaxArcher:
    """Our side: policy, critic, sampler and learner at the workload's sizes."""

    def __init__(self, w: Workload, tokenizer, dtype=jnp.float32, seed: int = 0, micro_batch_size: int | str = "auto",
                 per_step_pi: bool = False, packed: bool = True):
        self.w = w
        self.per_step_pi = per_step_pi  # each critic step's a_π in its own decode (as before the phase drew them together)
        self.packed = packed  # at real lengths: learner batches packed as a run packs them (False: padded to the longest)
        kw = dict(dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(seed))
        policy = models.GPT2LMHeadModel(w.policy, **kw)
        critic = learners.DoubleCritic(models.RobertaModel(w.critic, **kw), **kw)
        mesh = sharding.make_mesh()
        config = learners.LearnerConfig(gamma=w.gamma, tau=w.tau, critic_lr=w.critic_lr, actor_lr=w.lm_lr,
                                        max_grad_norm=w.max_grad_norm, micro_batch_size=micro_batch_size)
        # As the train app: on CPUs "auto" stays at the official micro-batch (micro_batching.auto_limit).
        limit = micro_batching.auto_limit(jax.default_backend(), w.batch)
        self.learner = Steps(learners.Actor(policy), critic, config, mesh=mesh, micro_batch_limit=limit)
        self.groups = group_count(w.transitions, sharding.batch_size_multiple(mesh), micro_batch_size, limit)
        self.padding: dict[str, list[float]] = {"critic": [], "actor": []}  # per step, at real lengths
        self.sampler = Sampler(policy, tokenizer, mesh=mesh)
        self.params = SamplingParams(max_new_tokens=w.new_tokens, temperature=w.temperature, top_p=w.top_p,
                                     stop_strings=(), stop_at_eos=False)
        self.critic_state, self.actor_state = self.learner.init_critic(), self.learner.init_actor()
        self.key = jax.random.key(seed)
        self.calls = 0
        self.timers: dict[str, float] = {}

    def _next_key(self) -> jax.Array:
        self.calls += 1
        return jax.random.fold_in(self.key, self.calls)

    def _timed(self, name: str, fn, *args):
        start = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        self.timers[name] = self.timers.get(name, 0.0) + time.perf_counter() - start
        return out

    def generate(self, prompts: np.ndarray | list[np.ndarray]) -> np.ndarray:
        """``new_tokens`` sampled ids per prompt (on the host, as the trainer needs them); prompts
        of several lengths (one row each) as a run's per-step a_π, texts included."""
        if isinstance(prompts, list):
            return self.sampler.generate_rows(prompts, self._next_key(), self.params,
                                              model_state=self.learner.policy_params(self.actor_state)).tokens
        out = self.sampler.generate_tokens(prompts, np.ones_like(prompts), self._next_key(), self.params,
                                           model_state=self.learner.policy_params(self.actor_state))
        return np.asarray(jax.device_get(out.tokens))[: len(prompts)]

    def rollout(self, prompts: list[np.ndarray]) -> int:
        for turn_prompts in prompts:
            self.generate(turn_prompts)
        return sum(len(p) for p in prompts) * self.w.new_tokens

    def critic_batch(self, sample: dict, pi: np.ndarray):
        """A critic step's batch from a workload sample and its sampled ``a_π`` ids: at fixed lengths
        the sample's arrays; at real lengths its rows packed (or padded) as a run lays them out."""
        if isinstance(sample["observation"], np.ndarray):
            return learners.CriticBatch(
                _tokens(sample["observation"]), _tokens(sample["action"]), _tokens(sample["next_observation"]),
                _tokens(to_critic_ids(pi, self.w.critic.vocab_size)), sample["reward"], sample["terminal"],
            )
        pi_rows = critic_pi_rows(pi, sample["pi_length"], self.w.critic.vocab_size)
        rows = (sample["observation"], sample["action"], sample["next_observation"], pi_rows)
        real = sum(r.size for field in rows for r in field) + sum(r.size for r in sample["observation"])  # s twice
        make = packed_critic_batch if self.packed else critic_batch
        kw = dict(groups=self.groups) if self.packed else {}
        batch = make(CRITIC_PAD, *rows, sample["reward"], sample["terminal"], max_length=row_limit(self.w) + 2, **kw)
        encoded = ([batch.online.ids, batch.target.ids] if self.packed else
                   [batch.observation.ids, batch.observation.ids, batch.action.ids, batch.next_observation.ids,
                    batch.pi_action.ids])
        self.padding["critic"].append(padding_fraction(encoded, real))
        return batch

    def actor_batch(self, sample: dict, pi: np.ndarray):
        """An actor step's batch from a workload sample and its sampled ``a_π`` ids (as
        :meth:`critic_batch`)."""
        if isinstance(sample["observation"], np.ndarray):
            return learners.ActorBatch(
                _tokens(sample["policy_observation"]), _tokens(pi), _tokens(sample["observation"]),
                _tokens(to_critic_ids(pi, self.w.critic.vocab_size)),
            )
        w, prompt_limit = self.w, self.sampler.prompt_limit(self.params)
        prompts = sample["policy_observation"]
        actions = [p[:k] for p, k in zip(pi, sample["pi_length"])]
        critic_pi = critic_pi_rows(pi, sample["pi_length"], w.critic.vocab_size)
        real = sum(r.size for field in (prompts, actions, sample["observation"], critic_pi) for r in field)
        if self.packed:
            batch = packed_actor_batch(self.sampler.pad_id, CRITIC_PAD.pad_token_id, prompts, actions,
                                       sample["observation"], critic_pi, prompt_limit=prompt_limit,
                                       action_length=w.new_tokens, groups=self.groups, max_length=row_limit(w) + 2)
            encoded = [batch.policy.ids, batch.critic.ids]
        else:
            observation = pad_rows(prompts, self.sampler.pad_id, left=True, max_length=prompt_limit)
            action = pad_rows(actions, self.sampler.pad_id, left=False, max_length=w.new_tokens, length=w.new_tokens)
            batch = actor_batch(observation, action, CRITIC_PAD, sample["observation"], critic_pi,
                                max_length=row_limit(w) + 2)
            encoded = [batch.observation.ids, batch.action.ids, batch.critic_observation.ids, batch.critic_action.ids]
        self.padding["actor"].append(padding_fraction(encoded, real))
        return batch

    def phase_pi(self, samples: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
        """The a_π of all of a critic phase's steps at once, as a run draws them
        (:func:`archer_jax.sampling.phase_decodes.generate_steps`: sorted by length, in the
        decodes that fit, each row with its step's key)."""
        prompts = [list(s["policy_observation"]) for s in samples]
        keys = [self._next_key() for _ in samples]
        generations = phase_decodes.generate_steps(self.sampler, prompts, keys, [range(len(p)) for p in prompts],
                                                   self.params, model_state=self.learner.policy_params(self.actor_state))
        return [g.tokens for g in generations]

    def critic_step(self, sample: dict[str, np.ndarray]) -> None:
        pi = self._timed("critic_sampling_s", self.generate, sample["policy_observation"])
        self.critic_program(sample, pi)

    def critic_program(self, sample: dict[str, np.ndarray], pi: np.ndarray) -> None:
        batch = self.critic_batch(sample, pi)

        def step():
            program = self.learner.packed_critic_step if isinstance(batch, PackedCriticBatch) else self.learner.critic_step
            self.critic_state, metrics = program(self.critic_state, batch)
            return metrics

        self._timed("critic_program_s", step)

    def actor_step(self, sample: dict[str, np.ndarray]) -> None:
        pi = self._timed("actor_sampling_s", self.generate, sample["policy_observation"])
        batch = self.actor_batch(sample, pi)

        def step():
            program = self.learner.packed_actor_step if isinstance(batch, PackedActorBatch) else self.learner.actor_step
            self.actor_state, metrics = program(self.actor_state, self.critic_state.params, batch)
            return metrics

        self._timed("actor_program_s", step)

    def iteration(self, data: Data) -> dict[str, float]:
        self.timers = {}
        start = time.perf_counter()
        tokens = self.rollout(data.prompts)
        rollout_s = time.perf_counter() - start
        if self.per_step_pi:
            for sample in data.critic_samples:
                self.critic_step(sample)
        else:
            for sample, pi in zip(data.critic_samples, self._timed("critic_sampling_s", self.phase_pi, data.critic_samples)):
                self.critic_program(sample, pi)
        critic_s = time.perf_counter() - start - rollout_s
        for sample in data.actor_samples:
            self.actor_step(sample)
        actor_s = time.perf_counter() - start - rollout_s - critic_s
        return phase_times(self.w, rollout_s, critic_s, actor_s, tokens) | {
            k: v / max(1, self.w.critic_epochs if k.startswith("critic") else self.w.actor_epochs)
            for k, v in self.timers.items()
        }

    def decode_step_s(self, prompts: np.ndarray) -> float:
        """Seconds per decode step at the rollout batch: (all tokens - one token) / (new - 1)."""
        times = {}
        for new in (1, self.w.new_tokens):
            params = SamplingParams(max_new_tokens=new, stop_strings=(), stop_at_eos=False)
            run = lambda: jax.block_until_ready(self.sampler.generate_tokens(  # noqa: E731
                prompts, np.ones_like(prompts), self._next_key(), params,
                model_state=self.learner.policy_params(self.actor_state)))
            run()
            start = time.perf_counter()
            run()
            times[new] = time.perf_counter() - start
        return (times[self.w.new_tokens] - times[1]) / (self.w.new_tokens - 1)


def print_top_ops(trace_dir: Path, top: int = 15) -> None:
    """The XLA ops that took the most time in the trace of one iteration (summed over calls)."""
    import collections
    import gzip
    import json

    path = max(trace_dir.glob("**/*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    total, calls = collections.Counter(), collections.Counter()
    for e in events:  # complete events of compiled ops (Python frames start with "$")
        if e.get("ph") == "X" and not e["name"].startswith("$") and "Thunk" not in e["name"]:
            total[e["name"]] += e.get("dur", 0)
            calls[e["name"]] += 1
    print(f"top XLA ops of the iteration ({path}):")
    for name, micros in total.most_common(top):
        print(f"  {micros / 1e3:9.1f} ms  x{calls[name]:<5d} {name}")


def _median(runs: list[dict]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def ours_summary(ours: JaxArcher, data: Data, runs: list[dict], warm_s: float, args) -> dict:
    """Median of our timed iterations plus compile time, TFLOP/s, and (with a known peak) MFU
    and the decode step's roofline fraction."""
    w = ours.w
    result = _median(runs)
    result["compile_s"] = warm_s - result["iteration_s"]
    result["projected_run_hours"] = result["iteration_s"] * args.iterations / 3600  # --iterations of this workload
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:  # accelerators; CPUs report none
        result["peak_memory_gib"] = stats["peak_bytes_in_use"] / 2**30
    # The steps' useful FLOPs: at real lengths each row's own tokens (padding and packing's
    # cross-segment attention count for nothing).
    flops = real_step_flops(w, data) if data.real_lengths else step_flops(w)
    peak = peak_flops(jax.devices()[0], args.dtype, args.peak_flops)
    result.update(critic_program_tflops=flops["critic"] / result["critic_program_s"] / 1e12,
                  actor_program_tflops=flops["actor"] / result["actor_program_s"] / 1e12)
    if peak:
        result.update(critic_mfu=flops["critic"] / result["critic_program_s"] / peak,
                      actor_mfu=flops["actor"] / result["actor_program_s"] / peak)
    bandwidth = peak_bandwidth(jax.devices()[0], args.peak_bandwidth)
    if bandwidth:
        prompts = data.prompts[-1]
        step = ours.decode_step_s(prompts)
        param_bytes = sum(x.nbytes for x in jax.tree.leaves(ours.learner.policy_params(ours.actor_state)))
        rows, slots = ours.sampler.batch_bucket(len(prompts)), prompts.shape[1] + w.new_tokens
        floor = decode_floor_s(param_bytes, w.policy, rows, slots, jnp.dtype(args.dtype).itemsize, bandwidth)
        result.update(decode_step_ms=1e3 * step, decode_roofline_fraction=floor / step)
    return result


def bench(w: Workload, data: Data, tokenizer, args) -> tuple[dict, dict | None]:
    """Both sides on one workload: each warmed up, then ``repeats`` rounds of one iteration of
    ours followed by one of the reference, so that a machine whose speed drifts (a shared VM)
    slows both alike. Returns (ours, reference) medians; reference None with ``--no-reference``."""
    ours = JaxArcher(w, tokenizer, jnp.dtype(args.dtype), micro_batch_size=args.micro_batch_size,
                     per_step_pi=args.per_step_a_pi, packed=not args.padded)
    start = time.perf_counter()
    ours.iteration(data)  # compiles every program
    warm_s = time.perf_counter() - start
    agent = None
    if not args.no_reference:
        import torch

        import reference_torch

        agent = reference_torch.TorchArcher(w, "cuda" if torch.cuda.is_available() else "cpu")
        reference_torch.warm_up(agent, data)
    ours_runs, ref_runs = [], []
    for round_ in range(args.repeats):
        trace = Path(args.profile) / w.name / str(round_) if args.profile else None
        if trace:
            jax.profiler.start_trace(str(trace), create_perfetto_trace=True)
        ours_runs.append(ours.iteration(data))
        if trace:
            jax.profiler.stop_trace()
            print_top_ops(trace)
        if agent is not None:
            ref_runs.append(reference_torch.run_iteration(agent, data))
    result = ours_summary(ours, data, ours_runs, warm_s, args)
    for step, fractions in ours.padding.items():
        if fractions:  # real lengths: the learner batches' padding (positions that hold no token)
            result[f"{step}_padding"] = statistics.mean(fractions)
    result["micro_batch_size"] = {name: sorted({x.size for x in program.layouts.values()})
                                  for name, program in ours.learner.programs().items() if program.layouts}
    if agent is None:
        return result, None
    reference = _median(ref_runs)
    # Each round's own ratio: ours and the reference ran back to back, on the same machine state.
    reference["round_speedups"] = [r["iteration_s"] / o["iteration_s"] for o, r in zip(ours_runs, ref_runs)]
    return result, reference


ROWS = (("rollout_tokens_per_s", "rollout tokens/s", True), ("critic_step_s", "critic step s", False),
        ("actor_step_s", "actor step s", False), ("iteration_s", "full iteration s", False))


def ratio_rows(size: str, ours: dict, ref: dict) -> list[dict]:
    """One row per measure; ``speedup`` = how many times faster ours is."""
    rows = []
    for key, label, higher_is_better in ROWS:
        o, r = ours[key], ref[key]
        rows.append(dict(size=size, measure=label, ours=o, reference=r, speedup=(o / r) if higher_is_better else (r / o)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", "--workload", dest="sizes", nargs="+", choices=("tiny", "base", "paper"),
                        default=["tiny", "base"], help="workloads (benchmarks/workload.py); paper: an accelerator's")
    parser.add_argument("--iterations", type=int, default=2000, help="for the projected hours of a whole run")
    parser.add_argument("--base-micro-batches", type=int, default=4)
    parser.add_argument("--base-turns", type=int, default=2)
    parser.add_argument("--micro-batch-size", default="auto",
                        help="ours: transitions per micro-batch, 'auto' (by memory, the library's default) or a number; "
                             "the reference keeps the official micro-batches of 8")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed rounds after the warm-up (a round = one iteration of ours, then one of the reference)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="ours (the reference: float32)")
    parser.add_argument("--no-reference", action="store_true", help="ours only (e.g. for before/after profiling)")
    parser.add_argument("--profile", default=None, help="write a jax.profiler trace of our timed iterations here")
    parser.add_argument("--peak-flops", type=float, default=None, help="FLOP/s, for MFU on an unlisted device")
    parser.add_argument("--peak-bandwidth", type=float, default=None, help="bytes/s, for the decode roofline")
    parser.add_argument("--per-step-a-pi", action="store_true",
                        help="ours: each critic step's a_π in its own decode (the layout of earlier results)")
    parser.add_argument("--lengths", choices=("real", "fixed"), default="real",
                        help="learner rows at the real length distribution of the game's replay (benchmarks/workload.py; "
                             "base: the paper's 20-turn games), packed as a run packs them; fixed: every row "
                             "`observation` tokens, padded batches (the workload of earlier results)")
    parser.add_argument("--padded", action="store_true",
                        help="ours at real lengths: each field padded to its batch's longest (learner.pack_critic and "
                             "pack_actor false) instead of packed")
    parser.add_argument("--tag", default="", help="suffix of the result file name")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    info = machine()
    table, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:  # any tokenizer will do: the workload is token ids
        tokenizer = models.load_tokenizer(tiny.build_tiny("gpt2", Path(tmp) / "tok"))
        sizes = workloads(args.base_micro_batches, args.base_turns)
        for size in args.sizes:
            w = sizes[size]
            data = make_data(w, lengths=sizes[REAL_LENGTHS[size]] if args.lengths == "real" else None)
            ours, ref = bench(w, data, tokenizer, args)
            results[size] = dict(workload=w.describe(), lengths=data.lengths or "fixed",
                                 layout="padded" if args.padded or not data.real_lengths else "packed",
                                 a_pi="per step" if args.per_step_a_pi else "phase", ours=ours, reference=ref)
            if ref:
                table += ratio_rows(size, ours, ref)
            print(f"{size}: ours " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in ours.items()),
                  flush=True)
            if ref:
                print(f"{size}: reference " + ", ".join(f"{k} {v:.4g}" for k, v in ref.items() if k != "round_speedups")
                      + "; full-iteration speedup per round " + ", ".join(f"{x:.2f}" for x in ref["round_speedups"]), flush=True)

    print(f"\n{info['device_kind'] or info['backend']} x{info['device_count']}, {info['cpu_count']} CPUs, "
          f"{info['platform']}, {info['date']}; ours {args.dtype}, reference float32 (PyTorch)")
    if table:
        print_table(table, [("size", "size", ""), ("measure", "measure", ""), ("ours", "ours", ".4g"),
                            ("reference", "reference", ".4g"), ("speedup", "ours faster x", ".2f")])
    config = dict(vars(args), out=str(args.out))
    name = f"iteration_{jax.default_backend()}" + (f"_{args.tag}" if args.tag else "")
    path = write_result(name, config, table, args.out, extra=dict(results=results))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
