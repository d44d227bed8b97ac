"""Critic-step and actor-step times of the ArCHer learner, at tiny and base sizes.

Random weights and random token ids (nothing is downloaded). One step = ``--micro-batches``
micro-batches of ``--batch`` transitions (gradients averaged), global-norm clipping, Adam and,
for the critic, the Polyak update: the official setting is 32 micro-batches of 8 with
256-token observations. Sizes:

  * ``tiny``: the tiny preset (2-layer, 64-wide GPT-2 and RoBERTa, ~870-token vocabulary);
  * ``base``: GPT-2-124M and RoBERTa-base shapes.

A step's time grows linearly with its micro-batch count (a ``lax.scan``), so on a CPU
``--base-micro-batches`` can be cut and the 32-micro-batch time read as ``per micro-batch × 32``
(the table's ``per 32`` column, marked as scaled when it is).

    python benchmarks/learner.py --sizes tiny base --base-micro-batches 2
Prints a table; writes benchmarks/results/learner_<backend>.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax import learners, models
from archer_jax.agents.steps import Steps
from archer_jax.models import tiny
from archer_jax.runtime import sharding
from common import RESULTS, machine, print_table, time_call, write_result


def _tokens(rng, micro: int, batch: int, length: int, vocab: int, left: bool) -> learners.Tokens:
    ids = rng.integers(3, vocab, (micro, batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    lengths = rng.integers(length // 2, length + 1, (micro, batch))
    for index in np.ndindex(micro, batch):
        pad = length - lengths[index]
        if left:
            mask[index][:pad] = 0
        else:
            mask[index][length - pad :] = 0
    return learners.Tokens(ids.reshape(micro * batch, length), mask.reshape(micro * batch, length))


def _modules(size: str, dtype) -> tuple[learners.Actor, learners.DoubleCritic]:
    if size == "tiny":
        gpt2_config, roberta_config = tiny.tiny_config("gpt2", 866), tiny.tiny_config("roberta", 866)
    else:
        gpt2_config, roberta_config = models.GPT2Config(), models.RobertaConfig()
    kw = dict(dtype=dtype, rngs=nnx.Rngs(0))
    policy = models.GPT2LMHeadModel(gpt2_config, **kw)
    critic = learners.DoubleCritic(models.RobertaModel(roberta_config, **kw), **kw)
    return learners.Actor(policy), critic


def bench(size: str, micro: int, args) -> list[dict]:
    actor, critic = _modules(size, jnp.dtype(args.dtype))
    mesh = sharding.make_mesh() if args.mesh else None
    # The step's micro * batch transitions in micro-batches of --batch (a fixed layout, not "auto").
    learner = Steps(actor, critic, learners.LearnerConfig(micro_batch_size=args.batch), mesh=mesh)
    rng = np.random.default_rng(0)
    pv, cv = actor.policy.config.vocab_size, critic.encoder.config.vocab_size
    b, obs, act = args.batch, args.observation, args.action
    critic_batch = learners.CriticBatch(
        _tokens(rng, micro, b, obs, cv, left=False),
        _tokens(rng, micro, b, act, cv, left=False),
        _tokens(rng, micro, b, obs, cv, left=False),
        _tokens(rng, micro, b, act, cv, left=False),
        rng.normal(size=micro * b).astype(np.float32),
        rng.integers(0, 2, micro * b).astype(np.float32),
    )
    actor_batch = learners.ActorBatch(
        _tokens(rng, micro, b, obs, pv, left=True),
        _tokens(rng, micro, b, act, pv, left=False),
        _tokens(rng, micro, b, obs, cv, left=False),
        _tokens(rng, micro, b, act, cv, left=False),
    )
    states = {"critic": learner.init_critic(), "actor": learner.init_actor()}

    def critic_step():
        states["critic"], metrics = learner.critic_step(states["critic"], critic_batch)
        jax.block_until_ready(metrics)

    def actor_step():
        states["actor"], metrics = learner.actor_step(states["actor"], states["critic"].params, actor_batch)
        jax.block_until_ready(metrics)

    rows = []
    for name, fn in (("critic", critic_step), ("actor", actor_step)):
        first, median = time_call(fn, args.repeats)
        rows.append(dict(size=size, step=name, micro_batches=micro, batch=b, observation=obs, action=act,
                         step_s=median, compile_s=first - median, per_micro_batch_s=median / micro,
                         per_32_s=32 * median / micro, scaled=micro != 32,
                         transitions_per_s=micro * b / median))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=["tiny", "base"], default=["tiny", "base"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=32)
    parser.add_argument("--base-micro-batches", type=int, default=None, help="micro-batches at base size (default: --micro-batches)")
    parser.add_argument("--observation", type=int, default=256, help="observation tokens")
    parser.add_argument("--action", type=int, default=32, help="action tokens")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--mesh", action="store_true", help="data-parallel over all devices")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    rows = []
    for size in args.sizes:
        micro = args.base_micro_batches if size == "base" and args.base_micro_batches else args.micro_batches
        rows += bench(size, micro, args)
    info = machine()
    print(f"{info['device_kind'] or info['backend']} ×{info['device_count']}, {info['cpu_count']} CPUs, {info['date']}: "
          f"batch {args.batch} × micro-batches, observation {args.observation}, action {args.action}, {args.dtype}")
    for r in rows:
        r["per_32"] = f"{r['per_32_s']:.2f}{'*' if r['scaled'] else ''}"
    print_table(
        rows,
        [("size", "size", ""), ("step", "step", ""), ("micro_batches", "micro", "d"), ("step_s", "step s", ".2f"),
         ("per_micro_batch_s", "per micro s", ".3f"), ("per_32", "per 32 s", ""), ("compile_s", "compile s", ".1f"),
         ("transitions_per_s", "trans/s", ".1f")],
    )
    print("* scaled from fewer micro-batches (time grows linearly with their number)")
    for r in rows:
        r.pop("per_32")
    config = vars(args) | {"out": str(args.out)}
    path = write_result(f"learner_{jax.default_backend()}_{args.dtype}", config, rows, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
