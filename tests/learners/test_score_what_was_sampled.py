"""Every policy-gradient learner scores its actions under the distribution the sampler drew them
from: with a constant advantage, the mean actor gradient over many actions drawn by our own
sampler is zero within its standard error. Through the path a run uses: the sampler's rows
(``acting.sampled_actor_rows``), ``acting.actor_batch_of``, and the compiled actor step (ArCHer's)
or PPO step, whose gradient is read off an SGD update of learning rate 1.

The statistic is the gradient's component along the policy's final layer-norm scale, i.e. the
derivative of the loss with respect to a common factor on the logits (the tiny GPT-2's final norm
has no bias at initialisation): exactly the direction a temperature or nucleus mismatch pushes,
since under samples of a cooler (or cut) distribution the model's own score
``x_a - E_p[x]`` has a positive mean. The tiny policy's logits are sharpened (its final norm's
scale x 10) so that its distribution is peaked like a trained policy's.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from archer_jax import acting, learners, models
from archer_jax.agents import archer as archer_agent
from archer_jax.agents import ppo as ppo_agent
from archer_jax.learners import train_state
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.networks import Networks
from archer_jax.learners.ppo import PPOBatch, PPOConfig
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.models.tokenizer import token_rows
from archer_jax.sampling import Sampler, SamplingParams
from tests.learners.conftest import OBSERVATIONS

STEPS, ROWS, NEW_TOKENS = 32, 16, 8  # batches (each one gradient), rows per batch, tokens per action
SHARPEN = 10.0
ADVANTAGE = 1.0


def _policy(tiny_dirs):
    policy = models.load_gpt2(tiny_dirs[0])
    policy.ln_f.scale[...] = policy.ln_f.scale[...] * SHARPEN
    return policy


@pytest.fixture(scope="module")
def setup(tiny_dirs, tokenizers):
    """The sampler on the sharpened policy, and a critic whose advantage is ``ADVANTAGE`` everywhere
    (its heads' last layers zero: Q = ADVANTAGE, V = 0)."""
    critic = learners.DoubleCritic(models.load_roberta(tiny_dirs[1]), rngs=nnx.Rngs(0))
    for name in ("q1", "q2", "v1", "v2"):
        out = getattr(critic, name).out
        out.kernel[...] = jnp.zeros_like(out.kernel[...])
        out.bias[...] = jnp.full_like(out.bias[...], ADVANTAGE if name[0] == "q" else 0.0)
    return Sampler(_policy(tiny_dirs), tokenizers[0]), critic


@pytest.fixture(scope="module")
def sampled(setup, tokenizers):
    """:func:`sampled_batches` for this module's setup, each (sampling, packed) drawn once: tests at
    the same sampling share its draw."""
    return functools.cache(functools.partial(sampled_batches, setup, tokenizers))


def sampled_batches(setup, tokenizers, sampling: SamplingParams, seed: int = 7, packed: bool = False):
    """``STEPS`` actor batches of ``ROWS`` fresh a_π each, as a run lays them out (``packed``: as
    online ArCHer's run with ``learner.pack_actor``, one group)."""
    sampler, _ = setup
    observations = [OBSERVATIONS[i % len(OBSERVATIONS)] for i in range(STEPS * ROWS)]
    rows, _ = acting.sampled_actor_rows(
        sampler, tokenizers[1], token_rows(tokenizers[0], observations, max_length=sampler.prompt_limit(sampling)),
        token_rows(tokenizers[1], observations, max_length=512), jax.random.key(seed), sampling)
    cut = lambda k: acting.ActorRows(*(x[k * ROWS:(k + 1) * ROWS] for x in rows))  # noqa: E731
    if packed:
        return [acting.packed_actor_rows(cut(k), sampler, tokenizers[1], sampling, 1) for k in range(STEPS)]
    # One critic bucket for every batch (a_π's critic tokens fit 32): one compiled step.
    return [acting.actor_batch_of(cut(k), sampler, tokenizers[1], sampling, min_action_bucket=32) for k in range(STEPS)]


def gradient_statistic(step, state, batches, *args) -> tuple[float, float]:
    """Mean and standard error over the batches of the gradient along the final norm's scale."""
    scale = np.asarray(state.params["policy"]["ln_f"]["scale"][...])
    values = []
    for batch in batches:
        new, _ = step(jax.tree.map(jnp.copy, state), *args, batch)  # the step donates its state
        gradient = scale - np.asarray(new.params["policy"]["ln_f"]["scale"][...])  # SGD at lr 1
        values.append(float(np.sum(gradient * scale)))
    values = np.asarray(values)
    return values.mean(), values.std(ddof=1) / np.sqrt(len(values))


def archer_statistic(tiny_dirs, setup, batches, scored: TokenDistribution, packed: bool = False) -> float:
    """z of ArCHer's compiled actor step's mean gradient under a constant advantage (``packed``: its
    packed step, on packed batches)."""
    actor = learners.Actor(_policy(tiny_dirs), rngs=nnx.Rngs(0))
    networks = Networks(actor, setup[1], matmul_precision="highest")
    tx, critic_tx = optax.sgd(1.0), train_state.optimizer(1e-4, 1.0)
    step = archer_agent.actor_step(networks, tx, critic_tx, LearnerConfig(distribution=scored), packed=packed)
    mean, error = gradient_statistic(step, networks.init_actor(tx), batches, networks.init_critic(critic_tx).params)
    return mean / error


def ppo_statistic(tiny_dirs, batches, scored: TokenDistribution) -> float:
    """z of PPO's compiled first-epoch step's mean gradient under a constant advantage (its
    π_old from the same scoring, as the PPO agent's rollout pass takes it)."""
    networks = Networks(learners.Actor(_policy(tiny_dirs), rngs=nnx.Rngs(0)), None, matmul_precision="highest")
    tx = optax.sgd(1.0)
    step = ppo_agent.compile_ppo_step(networks, tx, PPOConfig(), scored)
    token_stats = ppo_agent.compile_token_stats(networks, scored)
    state = networks.init_actor(tx)
    ppo_batches = []
    for b in batches:
        old, _ = token_stats(state.params, state.frozen, b.observation, b.action)
        mask = np.asarray(b.action.mask, np.float32)
        zeros = np.zeros_like(mask)
        ppo_batches.append(PPOBatch(b.observation, b.action, old, zeros, ADVANTAGE * mask, zeros, zeros))
    mean, error = gradient_statistic(step, state, ppo_batches)
    return mean / error


def sampling_at(temperature: float, top_p: float) -> SamplingParams:
    return SamplingParams(max_new_tokens=NEW_TOKENS, temperature=temperature, top_p=top_p)


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_constant_advantage_moves_no_policy_at_the_tiny_presets_sampling(tiny_dirs, setup, sampled):
    """At temperature 0.7 and top_p 0.9 (the tiny presets'): ArCHer's actor step has mean gradient 0
    within 4 standard errors, padded and packed (a run's default). Scored as it was before (at
    temperature 1, no nucleus) the same samples push the policy's scale by more than 10 standard
    errors."""
    sampling = sampling_at(0.7, 0.9)
    batches = sampled(sampling)
    assert abs(archer_statistic(tiny_dirs, setup, batches, sampling.distribution)) < 4
    assert abs(archer_statistic(tiny_dirs, setup, batches, TokenDistribution())) > 10
    packed = sampled(sampling, packed=True)
    assert abs(archer_statistic(tiny_dirs, setup, packed, sampling.distribution, packed=True)) < 4


@pytest.mark.slow
def test_a_constant_advantage_moves_no_policy_in_ppos_first_epoch(tiny_dirs, setup, sampled):
    """PPO's first-epoch step at the tiny presets' sampling: mean gradient 0 within 4 standard
    errors; scored as before (at the temperature, without the nucleus) more than 10 away."""
    sampling = sampling_at(0.7, 0.9)
    batches = sampled(sampling)
    assert abs(ppo_statistic(tiny_dirs, batches, sampling.distribution)) < 4
    assert abs(ppo_statistic(tiny_dirs, batches, TokenDistribution(temperature=0.7))) > 10


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(0.7, 1.0), (1.0, 0.9), (1.0, 1.0)])
def test_a_constant_advantage_moves_no_policy_at_other_samplings(tiny_dirs, setup, sampled, temperature, top_p):
    """The same for both steps at the other corners of temperature {0.7, 1} x top_p {0.9, 1}."""
    sampling = sampling_at(temperature, top_p)
    batches = sampled(sampling)
    assert abs(archer_statistic(tiny_dirs, setup, batches, sampling.distribution)) < 4
    assert abs(ppo_statistic(tiny_dirs, batches, sampling.distribution)) < 4
    if not sampling.distribution.is_model:  # the untempered, uncut model: what the actor scored before
        assert abs(archer_statistic(tiny_dirs, setup, batches, TokenDistribution())) > 10


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_centred_advantage_is_the_batch_mean_less(tiny_dirs, setup, sampled):
    """``learner.center_advantage``: a constant advantage less the step batch's mean is 0 on every
    row, so the compiled step (in 4 micro-batches, the mean over all of them) moves nothing."""
    sampling = sampling_at(0.7, 0.9)
    batch = sampled(sampling)[0]
    actor = learners.Actor(_policy(tiny_dirs), rngs=nnx.Rngs(0))
    networks = Networks(actor, setup[1], matmul_precision="highest", micro_batch_size=ROWS // 4)
    tx, critic_tx = optax.sgd(1.0), train_state.optimizer(1e-4, 1.0)
    config = LearnerConfig(distribution=sampling.distribution, center_advantage=True)
    step = archer_agent.actor_step(networks, tx, critic_tx, config)
    state = networks.init_actor(tx)
    before = jax.device_get(state.params)
    new, metrics = step(state, networks.init_critic(critic_tx).params, batch)
    assert float(metrics["advantage/max"]) == float(metrics["advantage/min"]) == 0.0
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(jax.device_get(new.params))):
        np.testing.assert_array_equal(a, b)
