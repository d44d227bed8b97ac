"""The TD target stops where the game ends: a Twenty Questions game lost at its turn limit is over
(its last transition terminal, the target r alone), while a limit configured as a cut
(``env.turn_limit = "cut"``) bootstraps from the target critic's V̄(s'). Through a run's path: the
play loop, the input pipeline's replay columns, the replay buffer, a critic batch and the
compiled critic step, whose target critic here says V̄ = -5 everywhere.
"""

import functools

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import learners, models, rollout
from archer_jax.agents import archer as archer_agent
from archer_jax.envs.pool import EnvPool
from archer_jax.envs.twenty_questions import TwentyQuestionsSubset
from archer_jax.input_pipeline import InputPipeline
from archer_jax.learners import train_state
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.networks import Networks
from archer_jax.replay import ReplayBuffer

TURNS, V_NEXT, GAMMA = 3, -5.0, 0.95


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
@pytest.mark.parametrize("turn_limit", ["game", "cut"])
def test_the_td_target_is_the_reward_alone_where_the_limit_ends_the_game(tiny_dirs, tokenizers, turn_limit):
    with EnvPool(functools.partial(TwentyQuestionsSubset, max_turns=TURNS), num_envs=2) as pool:
        episodes = rollout.play(pool, lambda obs, turn, games: ["Is it alive?"] * len(obs), seeds=[1, 2],
                                max_turns=TURNS, turn_limit=turn_limit)
    pipeline = InputPipeline(*tokenizers, 64, 64, 8)
    rows = pipeline.transitions(episodes, 0)
    ends = turn_limit == "game"
    assert rows["at_limit"] == [0.0, 0.0, 1.0] * 2  # the replay records where the limit ended a dialogue
    assert rows["terminal"] == [0.0, 0.0, float(ends)] * 2
    replay = ReplayBuffer(16)
    replay.add(**rows)
    sample = replay.gather(np.arange(len(replay)))
    batches = {True: pipeline.packed_critic_batch(sample, sample["critic_action"], 1),  # as a run takes it
               False: pipeline.critic_batch(sample, sample["critic_action"])}  # learner.pack_critic=False

    critic = learners.DoubleCritic(models.load_roberta(tiny_dirs[1]), rngs=nnx.Rngs(0))
    for name in ("q1", "q2", "v1", "v2"):  # Q = 0 and V = V_NEXT for every input
        out = getattr(critic, name).out
        out.kernel[...] = jnp.zeros_like(out.kernel[...])
        out.bias[...] = jnp.full_like(out.bias[...], V_NEXT if name[0] == "v" else 0.0)
    actor = learners.Actor(models.load_gpt2(tiny_dirs[0]), rngs=nnx.Rngs(0))
    networks = Networks(actor, critic, matmul_precision="highest")
    tx = train_state.optimizer(1e-4, 1.0)
    for packed, batch in batches.items():
        step = archer_agent.critic_step(networks, tx, LearnerConfig(gamma=GAMMA, pack_critic=packed))
        _, metrics = step(networks.init_critic(tx), batch)
        bootstrapped = -1.0 + GAMMA * V_NEXT
        last = -1.0 if ends else bootstrapped  # every turn costs -1; the last one's target stops there if the game ended
        np.testing.assert_allclose(float(metrics["q_target/min"]), bootstrapped, atol=1e-5)
        np.testing.assert_allclose(float(metrics["q_target/max"]), last, atol=1e-5)
        np.testing.assert_allclose(float(metrics["q_target/mean"]), (2 * bootstrapped + last) / 3, atol=1e-5)
