"""CHAI's acting step: k samples per observation from the policy, scored by the target critic.

One call of :func:`archer_jax.agents.chai.chai_actions` on ``--batch`` observations of about
``--observation`` policy tokens (random token ids of the tiny preset's tokenizer, as text), with
the tiny preset's models (random weights) and sampling (32 new tokens, T 0.7, top-p 0.9, stop at
"\\n"). CHAI calls it for every rollout turn and for every critic step's ``a_π``, so it sets the
speed of a CHAI run.

    python benchmarks/chai.py --batch 32 --k 5
Prints the median seconds per call; writes benchmarks/results/chai_<backend>.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from archer_jax import learners, models
from archer_jax.agents import chai
from archer_jax.models import tiny
from archer_jax.sampling import Sampler, SamplingParams
from common import RESULTS, machine, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--observation", type=int, default=200, help="policy tokens per observation")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        policy_dir, critic_dir = tiny.build_tiny("gpt2", Path(tmp) / "p"), tiny.build_tiny("roberta", Path(tmp) / "c")
        tokenizer, critic_tokenizer = models.load_tokenizer(policy_dir), models.load_tokenizer(critic_dir)
        sampler = Sampler(models.load_gpt2(policy_dir), tokenizer, max_prompt_length=256)
        critic = learners.DoubleCritic(models.load_roberta(critic_dir), rngs=nnx.Rngs(0))
        graphdef, params = learners.split_params(critic)
        rng = np.random.default_rng(0)
        ids = rng.integers(3, len(tokenizer), (args.batch, args.observation))
        observations = tokenizer.batch_decode(ids.tolist())
        sampling = SamplingParams(max_new_tokens=32, temperature=0.7, top_p=0.9)
        times = []
        for call in range(args.repeats + 1):  # the first call compiles
            start = time.perf_counter()
            chai.chai_actions(sampler, graphdef, params, critic_tokenizer, observations, jax.random.key(call),
                                  sampling, k=args.k, max_length=256)
            times.append(time.perf_counter() - start)
    seconds = float(np.median(times[1:]))
    row = dict(batch=args.batch, k=args.k, observation=args.observation, seconds=seconds, first_call_s=times[0])
    info = machine()
    print(f"{info['device_kind'] or info['backend']}, {info['cpu_count']} CPUs, {info['date']}: CHAI acting step, "
          f"{args.batch} observations x {args.k} samples: {seconds:.3f} s (first call {times[0]:.1f} s)")
    name = f"chai_{jax.default_backend()}" + (f"_{args.tag}" if args.tag else "")
    print(f"wrote {write_result(name, vars(args) | dict(out=str(args.out)), [row], args.out)}")


if __name__ == "__main__":
    main()
