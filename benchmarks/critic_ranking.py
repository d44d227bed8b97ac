"""Does a trained run's critic prefer the optimal expert's question to its own policy's?

At every state of a checkpoint's greedy evaluation games (the run's own, seed 0) the critic's
``min(Q1, Q2)`` of the policy's greedy utterance is compared with that of the question the
optimal scripted expert (``envs/experts.py``) asks there, as the actor's advantage would compare
them. Where the two differ, a critic that can steer the policy ranks the expert's higher; the
rows say how often it does, overall and at the states where the policy repeats a question
already asked. Twenty Questions (and its subset) only: the expert needs the knowledge base.

    python benchmarks/critic_ranking.py --workdir runs/20q_tiny --checkpoint 30 --name tiny_it30

Prints one line per checkpoint; writes benchmarks/results/critic_ranking.json (rows kept by
``--name``: a second name adds a row).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from archer_jax.agents.chai import _q_values
from archer_jax.envs import registry
from archer_jax.models.tokenizer import encode
from archer_jax.trained import TrainedRun
from common import RESULTS, write_result


def ranking(run: TrainedRun, games: int) -> dict:
    """The comparison's figures over ``games`` greedy evaluation games of ``run``."""
    parts, pipe = run.agent.parts, run.agent.parts.pipeline
    expert = registry.expert(run.config, "optimal", seed=0)
    episodes = run.play(games=games, seed=0)
    states = [(o, a.strip(), expert.act(o)) for ep in episodes for o, a in zip(ep.observations, ep.actions)]
    observations = [s[0] for s in states]
    obs = encode(pipe.critic_tokenizer, observations, max_length=pipe.max_critic_length)

    def q(actions: list[str]) -> np.ndarray:
        texts = pipe.critic_action_texts(observations, actions)
        act = encode(pipe.critic_tokenizer, texts, max_length=pipe.max_critic_length)
        q1, q2 = _q_values(run.agent.networks.critic_graphdef, run.states.critic.params, obs, act, 1,
                           parts.acting.sampler.matmul_precision)
        return np.minimum(np.asarray(q1), np.asarray(q2))[: len(states)]

    policy, chosen = [s[1] for s in states], [s[2] for s in states]
    diff = q(chosen) - q(policy)
    differ = np.array([p != e for p, e in zip(policy, chosen)])
    repeat = np.array([p in o for o, p, _ in states])

    def stats(mask: np.ndarray) -> dict:
        if not mask.any():
            return dict(states=0)
        return dict(states=int(mask.sum()), q_expert_minus_policy=float(diff[mask].mean()),
                    q_difference_sd=float(diff[mask].std()), expert_ranked_higher=float((diff[mask] > 0).mean()))

    return dict(checkpoint=run.checkpoint, greedy_return=float(np.mean([sum(ep.rewards) for ep in episodes])),
                states=len(states), policy_is_expert=float((~differ).mean()), policy_repeats=float(repeat.mean()),
                where_they_differ=stats(differ), at_repeats=stats(differ & repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--checkpoint", type=int, default=None, help="default: the newest that loads")
    parser.add_argument("--games", type=int, default=32)
    parser.add_argument("--name", required=True, help="the row's name in the results file")
    args = parser.parse_args()
    with TrainedRun.load(args.workdir, args.checkpoint) as run:
        row = dict(name=args.name, run=Path(args.workdir).name, **ranking(run, args.games))  # no machine path
    d = row["where_they_differ"]
    print(f"{args.name}: checkpoint {row['checkpoint']}, greedy return {row['greedy_return']:.2f}, "
          f"{row['states']} states, the policy's utterance is the expert's at {row['policy_is_expert']:.2f}, "
          f"repeats a question at {row['policy_repeats']:.2f}; where they differ ({d['states']}) the critic ranks "
          f"the expert's higher at {d.get('expert_ranked_higher', float('nan')):.2f} "
          f"(Q difference {d.get('q_expert_minus_policy', float('nan')):+.3f} ± {d.get('q_difference_sd', float('nan')):.3f})")
    path = RESULTS / "critic_ranking.json"
    rows = [r for r in json.loads(path.read_text())["rows"] if r["name"] != args.name] if path.exists() else []
    write_result("critic_ranking", dict(games=args.games), [*rows, row])


if __name__ == "__main__":
    main()
