"""Device memory of the learner steps, by micro-batch size and remat, from XLA's memory analysis.

What ``learner.micro_batch_size="auto"`` reads: each step is compiled (not run) for the paper's
batch, 256 transitions of GPT-2 + RoBERTa (``--size base``) with 128-token observations and
32-token actions, cut into micro-batches of each ``--micro`` size, with each ``--remat`` policy.
Per device it reports the step's temporaries, the bytes it adds to what is resident
(:func:`archer_jax.learners.micro_batching.program_bytes`) and the resident state (parameters,
target and Adam moments), and which micro-batch "auto" would take on devices of the
``--devices-gib`` sizes (a line through the measured sizes, as the planner uses it).

XLA's buffer assignment differs between backends (fusion, layouts), so figures from a CPU are a
guide to a GPU's, not equal to them: run it on the device itself for its own.

    python memory.py                                   # base size, this backend
    python memory.py --tag cpu_base                    # -> results/memory_cpu_base.json
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from archer_jax.agents.steps import Steps
from archer_jax import learners, models
from archer_jax.learners import train_state
from archer_jax.learners.micro_batching import HEADROOM, program_bytes
from archer_jax.models import tiny
from common import machine, print_table, write_result

GIB = 2**30


def modules(size: str, remat: str, dtype) -> tuple[learners.Actor, learners.DoubleCritic]:
    if size == "tiny":
        gpt2, roberta = tiny.tiny_config("gpt2", 866), tiny.tiny_config("roberta", 866)
    else:
        gpt2, roberta = models.GPT2Config(), models.RobertaConfig()
    def build():  # abstract: shapes only, nothing is initialised
        kw = dict(dtype=dtype, remat=remat, rngs=nnx.Rngs(0))
        encoder = models.RobertaModel(roberta, **kw)
        return learners.Actor(models.GPT2LMHeadModel(gpt2, **kw)), learners.DoubleCritic(encoder, dtype=dtype, rngs=kw["rngs"])

    return nnx.eval_shape(build)


def tokens(n: int, length: int) -> learners.Tokens:
    spec = jax.ShapeDtypeStruct((n, length), jnp.int32)
    return learners.Tokens(spec, spec)


def measure(args) -> list[dict]:
    dtype = jnp.dtype(args.dtype)
    n, obs, act = args.transitions, args.observation, args.action
    critic_batch = learners.CriticBatch(tokens(n, obs), tokens(n, act), tokens(n, obs), tokens(n, act),
                                        jax.ShapeDtypeStruct((n,), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32))
    actor_batch = learners.ActorBatch(tokens(n, obs), tokens(n, act), tokens(n, obs), tokens(n, act))
    rows = []
    for remat in args.remat:
        actor, critic = modules(args.size, remat, dtype)
        learner = Steps(actor, critic)
        critic_state = jax.eval_shape(functools.partial(train_state.create, tx=learner.critic_tx, with_target=True),
                                      train_state.split_params(critic)[1])
        actor_state = jax.eval_shape(functools.partial(train_state.create, tx=learner.actor_tx),
                                     train_state.split_params(actor)[1])
        programs = learner.programs()
        for step, args_ in (("critic", (critic_state, critic_batch)), ("actor", (actor_state, critic_state.params, actor_batch))):
            state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(args_[:-1]))
            batch_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(args_[-1]))
            for micro in args.micro:
                start = time.perf_counter()
                compiled = programs[f"{step}_step"].lower(*args_, count=n // micro).compile()
                analysis = compiled.memory_analysis()
                rows.append(dict(step=step, remat=remat, micro_batch=micro, count=n // micro,
                                 temp_gib=analysis.temp_size_in_bytes / GIB,
                                 adds_gib=program_bytes(compiled, batch_bytes) / GIB,
                                 resident_gib=state_bytes / GIB, compile_s=time.perf_counter() - start))
                print(rows[-1], flush=True)
    return rows


def auto_choice(rows: list[dict], device_gib: float) -> dict:
    """The micro-batch "auto" would take per (step, remat) on a device of ``device_gib`` GiB whose
    free memory is what the resident state leaves (a line through the measured sizes)."""
    out = {}
    for key in sorted({(r["step"], r["remat"]) for r in rows}):
        measured = sorted((r["micro_batch"], r["adds_gib"], r["resident_gib"]) for r in rows if (r["step"], r["remat"]) == key)
        sizes, adds = np.array([m[0] for m in measured]), np.array([m[1] for m in measured])
        budget = HEADROOM * (device_gib - measured[0][2])
        fits = [int(s) for s, a in zip(sizes, adds) if a <= budget]
        out[f"{key[0]}/{key[1]}"] = max(fits) if fits else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("tiny", "base"), default="base")
    parser.add_argument("--transitions", type=int, default=256)
    parser.add_argument("--observation", type=int, default=128)
    parser.add_argument("--action", type=int, default=32)
    parser.add_argument("--micro", type=int, nargs="+", default=[256, 64, 8])
    parser.add_argument("--remat", nargs="+", default=["none", "full"])
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--devices-gib", type=float, nargs="+", default=[16, 24, 40, 80])
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    rows = measure(args)
    print(f"\n{args.size}: {args.transitions} transitions, observation {args.observation}, action {args.action}, "
          f"{args.dtype}; per device, from XLA's memory analysis on {jax.default_backend()}")
    print_table(rows, [("step", "step", ""), ("remat", "remat", ""), ("micro_batch", "micro", "d"),
                       ("temp_gib", "temp GiB", ".2f"), ("adds_gib", "adds GiB", ".2f"),
                       ("resident_gib", "state GiB", ".2f"), ("compile_s", "compile s", ".1f")])
    choices = {f"{gib:g} GiB": auto_choice(rows, gib) for gib in args.devices_gib}
    for device, choice in choices.items():
        print(f"auto on {device}: {choice}")
    if args.tag:
        path = write_result(f"memory_{args.tag}", dict(vars(args), machine=machine()), rows, extra=dict(auto=choices))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
