"""The critic and actor steps padded against packed, at a real replay's length distribution, one machine.

Draws ``--steps`` critic-step batches of random token rows whose lengths follow a replay of the
workload's games (as :func:`workload.transition_lengths`: a transition of turn t observes
``first_prompt + turn_growth * t`` tokens; utterances of 6 to 16 tokens for a and a_π), then
runs the same batches through the critic step as the train app compiles it padded
(``learner.pack_critic=false``: every row padded to the bucket of its batch's longest, each
field its own) and packed (``learners.packed_batches``), both after one warm-up call on the
first batch (its compile time reported). The models are the workload's (random weights): ``tiny``
is the tiny preset's sizes and game (12 turns), ``base`` RoBERTa-base at the paper's 20-turn
lengths. On CPUs, micro-batches are the config's ``batch_size`` as in a run (``--micro-batch``).
``--steps-of actor`` does the same for ArCHer's actor step (``learner.pack_actor``): policy
observations of the same lengths, each followed by an ``a_π`` of 6 to 16 of its 32 sampled
tokens, and the critic's s and a_π.

    python benchmarks/packing.py                         # tiny and base on this machine
    python benchmarks/packing.py --steps-of actor --tag actor
    python benchmarks/packing.py --sizes base --transitions 256 --micro-batch auto   # an accelerator
Prints the table; writes benchmarks/results/packing_<backend>.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types

import jax
import numpy as np
from flax import nnx

from archer_jax import learners, models
from archer_jax.agents.steps import Steps
from archer_jax.learners.batches import actor_batch, critic_batch
from archer_jax.learners.packed_batches import group_count, packed_actor_batch, packed_critic_batch
from archer_jax.models.tokenizer import pad_rows
from archer_jax.runtime import sharding
from common import RESULTS, print_table, write_result
from workload import workloads

PAD = 1  # RoBERTa's pad id
LENGTHS = {"tiny": "tiny", "base": "paper"}  # the workload whose games give each size's lengths
TRANSITIONS = {"tiny": 32, "base": 32}
MICRO = {"tiny": 32, "base": 8}
NEW_TOKENS = 32  # the sampler's max_new_tokens: a padded actor batch's action length  # a CPU run's micro-batch: the config's batch_size (tiny preset; paper)


def batches(size: str, transitions: int, steps: int, seed: int = 0) -> list[dict]:
    """``steps`` critic samples: critic token rows at the real length distribution (a transition
    of a turn uniform over the game's turns, as in a buffer of games that run to their limit)."""
    w = workloads()[LENGTHS[size]]
    rng = np.random.default_rng(seed)
    limit = w.policy.n_positions if size == "base" else 256

    def rows(lengths) -> list[np.ndarray]:
        return [np.array([0, *rng.integers(3, 800, int(min(n, limit) - 2)), 2], np.int32) for n in lengths]

    out = []
    for _ in range(steps):
        turn = rng.integers(0, w.turns, transitions)
        out.append(dict(observation=rows(w.prompt_length(turn)), next_observation=rows(w.prompt_length(turn + 1)),
                        action=rows(rng.integers(6, 17, transitions)), pi_action=rows(rng.integers(6, 17, transitions)),
                        reward=-rng.integers(0, 2, transitions).astype(np.float32),
                        terminal=(rng.random(transitions) < 0.1).astype(np.float32), limit=limit))
    return out


def timed(step, state, batches_: list) -> tuple[float, list[float], object]:
    """(the first call's seconds, every later call's, the state)."""
    start = time.perf_counter()
    state, metrics = step(state, batches_[0])
    jax.block_until_ready(metrics)
    first = time.perf_counter() - start
    times = []
    for batch in batches_[1:]:
        start = time.perf_counter()
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    return first, times, state


def make_steps(size: str, micro: int | str):
    """The workload's models (random weights) and their steps on this machine's mesh."""
    w = workloads()[size if size == "tiny" else "base"]
    kw = dict(rngs=nnx.Rngs(0))
    policy = models.GPT2LMHeadModel(w.policy, **kw)
    critic = learners.DoubleCritic(models.RobertaModel(w.critic, **kw), **kw)
    mesh = sharding.make_mesh()
    config = learners.LearnerConfig(critic_lr=w.critic_lr, actor_lr=w.lm_lr, micro_batch_size=micro)
    return Steps(learners.Actor(policy), critic, config, mesh=mesh), mesh


def bench_actor(size: str, transitions: int, steps: int, micro: int | str) -> list[dict]:
    """The actor step padded and packed on the same batches (policy pad id 0 on random ids)."""
    steps_, mesh = make_steps(size, micro)
    tokenizer = types.SimpleNamespace(pad_token_id=PAD, padding_side="right")
    new = NEW_TOKENS
    drawn = batches(size, transitions, steps + 1)
    groups = group_count(transitions, sharding.batch_size_multiple(mesh), micro)
    padded, packed, real = [], [], []
    for d in drawn:
        limit = d["limit"] - new
        prompts = [r[1:-1][-limit:] for r in d["observation"]]  # the policy's rows: no <s> ... </s>
        actions = [r[1:-1] for r in d["pi_action"]]
        observation = pad_rows(prompts, 0, left=True, max_length=limit)
        action = pad_rows(actions, 0, left=False, max_length=new, length=new)
        padded.append(actor_batch(observation, action, tokenizer, d["observation"], d["pi_action"],
                                  max_length=d["limit"]))
        packed.append(packed_actor_batch(0, PAD, prompts, actions, d["observation"], d["pi_action"], prompt_limit=limit,
                                         action_length=new, groups=groups, max_length=d["limit"]))
        real.append(sum(len(r) for r in prompts + actions + d["observation"] + d["pi_action"]))
    rows = []
    critic = steps_.init_critic()
    for name, step, data in (("padded", steps_.actor_step, padded), ("packed", steps_.packed_actor_step, packed)):
        positions = [(b.observation.ids.size + b.action.ids.size + b.critic_observation.ids.size
                      + b.critic_action.ids.size) if name == "padded" else (b.policy.ids.size + b.critic.ids.size)
                     for b in data]
        first, times, _ = timed(lambda state, batch: step(state, critic.params, batch), steps_.init_actor(), data)
        rows.append(dict(size=size, step="actor", layout=name, transitions=transitions,
                         groups=groups if name == "packed" else None, first_call_s=first,
                         step_s=statistics.median(times), steps=len(times),
                         encoded_positions=statistics.mean(positions),
                         padding=1 - statistics.mean(r / p for r, p in zip(real, positions))))
    rows[1]["ratio"] = rows[0]["step_s"] / rows[1]["step_s"]
    return rows


def bench(size: str, transitions: int, steps: int, micro: int | str) -> list[dict]:
    steps_, mesh = make_steps(size, micro)
    tokenizer = types.SimpleNamespace(pad_token_id=PAD, padding_side="right")
    drawn = batches(size, transitions, steps + 1)
    groups = group_count(transitions, sharding.batch_size_multiple(mesh), micro)
    fields = ("observation", "action", "next_observation", "pi_action", "reward", "terminal")
    padded = [critic_batch(tokenizer, *(d[f] for f in fields), max_length=d["limit"]) for d in drawn]
    packed = [packed_critic_batch(tokenizer, *(d[f] for f in fields), groups=groups, max_length=d["limit"])
              for d in drawn]
    real = statistics.mean(sum(len(r) for f in fields[:4] for r in d[f]) + sum(len(r) for r in d["observation"])
                           for d in drawn)  # s is encoded twice (online and target)
    rows = []
    for name, step, data in (("padded", steps_.critic_step, padded), ("packed", steps_.packed_critic_step, packed)):
        positions = statistics.mean(
            (b.observation.ids.size * 2 + b.action.ids.size + b.next_observation.ids.size + b.pi_action.ids.size)
            if name == "padded" else (b.online.ids.size + b.target.ids.size) for b in data)
        first, times, _ = timed(step, steps_.init_critic(), data)
        rows.append(dict(size=size, step="critic", layout=name, transitions=transitions,
                         groups=groups if name == "packed" else None,
                         first_call_s=first, step_s=statistics.median(times), steps=len(times),
                         encoded_positions=positions, padding=1 - real / positions))
    rows[1]["ratio"] = rows[0]["step_s"] / rows[1]["step_s"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "base"], choices=["tiny", "base"])
    parser.add_argument("--transitions", type=int, default=None, help="per step (default: 32)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per layout, after the warm-up call")
    parser.add_argument("--micro-batch", default=None, help="transitions per micro-batch or 'auto' (default: a CPU run's)")
    parser.add_argument("--steps-of", nargs="+", default=["critic"], choices=["critic", "actor"],
                        help="which learner steps to time")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    rows = []
    for size in args.sizes:
        micro = args.micro_batch or MICRO[size]
        micro = micro if micro == "auto" else int(micro)
        for which in args.steps_of:
            rows += (bench_actor if which == "actor" else bench)(size, args.transitions or TRANSITIONS[size], args.steps,
                                                                 micro)
            print_table(rows[-2:], [("size", "size", "s"), ("step", "step", "s"), ("layout", "layout", "s"),
                                    ("transitions", "rows", "d"),
                                    ("first_call_s", "first s", ".2f"), ("step_s", "step s", ".3f"),
                                    ("padding", "padding", ".1%"), ("ratio", "padded/packed", ".2f")])
    name = f"packing_{jax.default_backend()}" + (f"_{args.tag}" if args.tag else "")
    write_result(name, vars(args), rows, RESULTS)


if __name__ == "__main__":
    main()
