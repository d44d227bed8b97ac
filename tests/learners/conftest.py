"""Tiny policy and critic models (random weights, offline tokenizers) and text batches."""

import numpy as np
import pytest
from flax import nnx

from archer_jax import learners, models
from tests.learners import text_batches as batches

OBSERVATIONS = [
    "Questions:\n",
    "Questions:\nIs it an animal? Yes.\n",
    "Questions:\nIs it made of metal? No.\nIs it a fruit? Yes.\n",
    "Questions:\nIs it bigger than a breadbox? No.\n",
]
ACTIONS = ["Is it a dog?", "Is it red?", "Is it a banana?", "Is it used for music?"]


@pytest.fixture(scope="package")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return models.build_tiny("gpt2", root / "policy"), models.build_tiny("roberta", root / "critic")


@pytest.fixture(scope="package")
def tokenizers(tiny_dirs):
    return models.load_tokenizer(tiny_dirs[0]), models.load_tokenizer(tiny_dirs[1])


def make_modules(tiny_dirs, token_baseline=False, seed=0):
    policy = models.load_gpt2(tiny_dirs[0])
    critic = learners.DoubleCritic(models.load_roberta(tiny_dirs[1]), rngs=nnx.Rngs(seed))
    return learners.Actor(policy, token_baseline=token_baseline, rngs=nnx.Rngs(seed)), critic


def texts(n, seed=0):
    rng = np.random.default_rng(seed)
    obs = [OBSERVATIONS[i] for i in rng.integers(0, len(OBSERVATIONS), n)]
    act = [ACTIONS[i] for i in rng.integers(0, len(ACTIONS), n)]
    return obs, act


def critic_batch(tokenizers, n=16, seed=0):
    obs, act = texts(n, seed)
    rng = np.random.default_rng(seed + 1)
    next_obs = [o + a + " No.\n" for o, a in zip(obs, act)]
    pi = [ACTIONS[i] for i in rng.integers(0, len(ACTIONS), n)]
    return batches.critic_batch(
        tokenizers[1], obs, act, next_obs, pi, rng.normal(size=n), rng.integers(0, 2, n)
    )


def actor_batch(tokenizers, n=16, seed=0):
    obs, act = texts(n, seed)
    policy_tok, critic_tok = tokenizers
    observation = batches.tokenize(policy_tok, obs, 64)
    bc = batches.bc_batch(policy_tok, obs, act)
    return batches.actor_batch(observation, bc.action, critic_tok, obs, act)
