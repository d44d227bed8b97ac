"""Token-level PPO: its losses against NumPy, its step on a tiny policy, and the dialogue token layout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import models
from archer_jax.agents.steps import Steps
from archer_jax.learners import Actor, LearnerConfig, ppo
from archer_jax.learners.dialogue_rows import DialogueRows as Layout
from archer_jax.learners.optimization import summarize
from archer_jax.models.token_distribution import TokenDistribution
from archer_jax.models.tokenizer import Tokens


def np_policy_loss(logp, old, adv, mask, clip):
    ratio = np.exp(logp - old)
    per_token = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - clip, 1 + clip))
    return (per_token * mask).sum() / mask.sum()


def np_value_loss(v, old_v, ret, mask, clip):
    clipped = old_v + np.clip(v - old_v, -clip, clip)
    return 0.5 * (np.maximum((v - ret) ** 2, (clipped - ret) ** 2) * mask).sum() / mask.sum()


def np_k3(logp, ref, mask):
    d = ref - logp
    return ((np.exp(d) - d - 1) * mask).sum() / mask.sum()


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    shape = (6, 9)
    mask = (rng.random(shape) < 0.7).astype(np.float32)
    old = rng.normal(-2, 0.5, shape).astype(np.float32)
    logp = (old + rng.normal(0, 0.4, shape)).astype(np.float32)  # ratios well outside 1 ± 0.2 too
    return dict(mask=mask, old=old, logp=logp, adv=rng.normal(size=shape).astype(np.float32),
                v=rng.normal(size=shape).astype(np.float32), old_v=rng.normal(size=shape).astype(np.float32),
                ret=rng.normal(size=shape).astype(np.float32), ref=(old + rng.normal(0, 0.3, shape)).astype(np.float32))


def test_policy_loss(arrays):
    a = arrays
    loss, aux = ppo.policy_loss(a["logp"], a["old"], a["adv"], a["mask"], 0.2)
    np.testing.assert_allclose(float(loss), np_policy_loss(a["logp"], a["old"], a["adv"], a["mask"], 0.2), rtol=1e-5)
    assert 0 < float(aux["clip_fraction"]) < 1


def test_policy_gradient_is_zero_where_clipped():
    """A ratio above 1 + ε with a positive advantage (or below 1 - ε with a negative one) gives no gradient."""
    old = jnp.zeros((1, 4))
    adv = jnp.array([[1.0, 1.0, -1.0, -1.0]])
    mask = jnp.ones((1, 4))
    logp = jnp.log(jnp.array([[1.5, 1.1, 0.5, 0.9]]))  # clipped, not, clipped, not
    grad = jax.grad(lambda lp: ppo.policy_loss(lp, old, adv, mask, 0.2)[0])(logp)
    np.testing.assert_allclose(np.asarray(grad)[0, [0, 2]], 0.0)
    assert np.all(np.asarray(grad)[0, [1, 3]] != 0)


def test_value_loss_and_kl(arrays):
    a = arrays
    np.testing.assert_allclose(float(ppo.value_loss(a["v"], a["old_v"], a["ret"], a["mask"], 0.2)),
                               np_value_loss(a["v"], a["old_v"], a["ret"], a["mask"], 0.2), rtol=1e-5)
    kl = float(ppo.kl_penalty(a["logp"], a["ref"], a["mask"]))
    np.testing.assert_allclose(kl, np_k3(a["logp"], a["ref"], a["mask"]), rtol=1e-5)
    assert kl > 0 and float(ppo.kl_penalty(a["logp"], a["logp"], a["mask"])) == 0.0


def test_ppo_loss_sums_its_terms(arrays):
    a = arrays
    config = ppo.PPOConfig(vf_coef=0.7, kl_coef=0.3, clip=0.1, value_clip=0.5)
    batch = ppo.PPOBatch(None, None, a["old"], a["old_v"], a["adv"], a["ret"], a["ref"])
    loss, aux = ppo.ppo_loss(a["logp"], a["v"], batch, a["mask"], config)
    want = (np_policy_loss(a["logp"], a["old"], a["adv"], a["mask"], 0.1)
            + 0.7 * np_value_loss(a["v"], a["old_v"], a["ret"], a["mask"], 0.5) + 0.3 * np_k3(a["logp"], a["ref"], a["mask"]))
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    no_value, aux = ppo.ppo_loss(a["logp"], None, batch, a["mask"], ppo.PPOConfig())
    assert "value_loss" not in aux and "kl_to_reference" not in aux
    np.testing.assert_allclose(float(no_value), np_policy_loss(a["logp"], a["old"], a["adv"], a["mask"], 0.2), rtol=1e-5)


def test_masked_summaries():
    values = jnp.array([[-1.0, -3.0, 0.0], [-2.0, 0.0, 0.0]])
    mask = jnp.array([[1, 1, 0], [1, 0, 0]])
    got = {k: float(v) for k, v in summarize("a", values, mask).items()}
    want = np.array([-1.0, -3.0, -2.0])
    assert got == pytest.approx({"a/mean": want.mean(), "a/min": -3.0, "a/max": -1.0, "a/std": want.std()})
    assert float(summarize("a", values)["a/max"]) == 0.0  # unmasked: every element
    assert {k: float(v) for k, v in summarize("a", values, jnp.zeros_like(mask)).items()} == \
        {"a/mean": 0.0, "a/min": 0.0, "a/max": 0.0, "a/std": 0.0}  # nothing kept: zeros, not inf


def test_config_checks():
    with pytest.raises(ValueError, match="adv_estimator: unknown value 'vtrace'"):
        ppo.PPOConfig(adv_estimator="vtrace")
    with pytest.raises(ValueError, match="value_head"):
        ppo.PPOConfig(value_head="twin")


def test_layout_round_trip():
    episodes = np.array([7, 7, 7, 9, 9, 12])
    lengths = np.array([3, 1, 2, 4, 2, 5])
    layout = Layout.of(episodes, lengths)
    assert layout.shape == (3, 8)  # 6, 6 and 5 tokens: rows of 8
    np.testing.assert_array_equal(layout.row, [0, 0, 0, 1, 1, 2])
    np.testing.assert_array_equal(layout.start, [0, 3, 4, 0, 4, 0])
    per_token = np.arange(6 * 5, dtype=np.float32).reshape(6, 5) + 1
    rows = layout.to_rows(per_token)
    np.testing.assert_array_equal(rows[0, :6], [1, 2, 3, 6, 11, 12])
    np.testing.assert_array_equal(rows[2, :5], per_token[5])
    back = layout.from_rows(rows, 5)
    mask = np.arange(5)[None] < lengths[:, None]
    np.testing.assert_array_equal(back, per_token * mask)
    ends = layout.ends(np.array([10, 20, 30, 40, 50, 60], np.float32))
    np.testing.assert_array_equal(np.nonzero(ends[0])[0], [2, 3, 5])
    np.testing.assert_array_equal(ends[1, [3, 5]], [40, 50])


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_ppo_step_on_a_tiny_policy(tiny_dirs):
    """A step that raises the advantage-weighted log-probs: on one batch, repeated steps lower the
    loss; with the rollout's own log-probs the first step's ratio is 1 (nothing clipped)."""
    policy = models.load_gpt2(tiny_dirs[0])
    config = ppo.PPOConfig(vf_coef=0.5, kl_coef=0.1)
    actor = Actor(policy, token_baseline=True, baseline_gradient=True, rngs=nnx.Rngs(0))
    learner = Steps(actor, None, LearnerConfig(actor_lr=1e-3), ppo=config, matmul_precision="highest")
    state = learner.init_actor()
    assert state.target is not None  # the reference policy, for the KL term
    rng = np.random.default_rng(0)
    obs = Tokens(rng.integers(1, 100, (8, 16)).astype(np.int32), np.ones((8, 16), np.int32))
    act = Tokens(rng.integers(1, 100, (8, 8)).astype(np.int32), (np.arange(8)[None] < rng.integers(2, 9, (8, 1))).astype(np.int32))
    logprobs, values = learner.token_stats(state, obs, act)
    ref, _ = learner.token_stats(state, obs, act, reference=True)
    np.testing.assert_allclose(ref, logprobs, rtol=1e-6)
    adv = rng.normal(size=(8, 8)).astype(np.float32) * act.mask
    batch = ppo.PPOBatch(obs, act, logprobs, values, adv, adv + values, ref)
    state, first = learner.ppo_step(state, batch)
    assert float(first["clip_fraction"]) == 0.0 and abs(float(first["approx_kl"])) < 1e-5
    kept = adv[act.mask.astype(bool)]  # the advantage statistics are the policy's tokens', not the padding's zeros
    for stat, want in dict(mean=kept.mean(), min=kept.min(), max=kept.max(), std=kept.std()).items():
        np.testing.assert_allclose(float(first[f"advantage/{stat}"]), want, rtol=1e-5, atol=1e-6, err_msg=stat)
    for _ in range(4):
        state, metrics = learner.ppo_step(state, batch)
    assert float(metrics["policy_loss"]) < float(first["policy_loss"])
    assert float(metrics["kl_to_reference"]) > 0
    after, _ = learner.token_stats(state, obs, act, reference=True)
    np.testing.assert_allclose(after, ref, rtol=1e-6)  # the reference does not move


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_separate_value_model_is_trained_by_the_value_loss_alone(tiny_dirs):
    """value_head="separate": with zero advantages the policy gets no gradient and stays put, while
    the value model (its own copy of the weights) moves, at the critic's learning rate."""
    config = ppo.PPOConfig(value_head="separate", vf_coef=1.0)
    actor = Actor(models.load_gpt2(tiny_dirs[0]), token_baseline=True, value_model=models.load_gpt2(tiny_dirs[0]),
                  rngs=nnx.Rngs(0))
    learner = Steps(actor, None, LearnerConfig(actor_lr=1e-3, critic_lr=1e-2), ppo=config)
    state = learner.init_actor()
    rng = np.random.default_rng(1)
    obs = Tokens(rng.integers(1, 100, (8, 16)).astype(np.int32), np.ones((8, 16), np.int32))
    act = Tokens(rng.integers(1, 100, (8, 8)).astype(np.int32), np.ones((8, 8), np.int32))
    logprobs, values = learner.token_stats(state, obs, act)
    zeros = np.zeros_like(logprobs)
    before = jax.tree.map(np.asarray, state.params)
    batch = ppo.PPOBatch(obs, act, logprobs, values, zeros, values + 1.0, zeros)
    state, metrics = learner.ppo_step(state, batch)
    assert float(metrics["value_loss"]) > 0
    # Adam's first step moves each weight by about its learning rate: the critic's 1e-2 here.
    kernel = lambda p: np.asarray(p["baseline"]["head"]["head"]["kernel"])  # noqa: E731
    assert np.abs(kernel(state.params) - kernel(before)).max() == pytest.approx(1e-2, rel=1e-3)
    state, _ = learner.ppo_step(state, batch)  # the head is no longer 0: the value model's layers get gradients
    same = lambda a, b: all(np.array_equal(x, np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))  # noqa: E731
    assert same(before["policy"], state.params["policy"])
    assert not same(before["baseline"]["model"], state.params["baseline"]["model"])


def test_trimmed_cuts_left_padding_to_the_longest_rows_bucket():
    from archer_jax.agents.ppo import trimmed

    mask = np.zeros((2, 64), np.int32)
    mask[0, -20:], mask[1, -3:] = 1, 1  # left-padded rows of 20 and 3 tokens
    ids = np.arange(2 * 64, dtype=np.int32).reshape(2, 64) * mask
    cut = trimmed(Tokens(ids, mask))
    assert cut.ids.shape == (2, 32)  # the bucket of 20
    np.testing.assert_array_equal(cut.ids, ids[:, -32:])
    assert trimmed(Tokens(ids[1:], mask[1:])).ids.shape == (1, 16)  # never below the shortest bucket


def nucleus_logprobs(logits: np.ndarray, ids: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """NumPy: ``log q(ids)`` for ``softmax(logits / T)`` cut to the smallest most likely set whose
    mass reaches ``top_p`` (ties at the boundary kept), renormalised; a token outside that set is
    scored as if it were inside it."""
    x = logits.astype(np.float64) / temperature
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.zeros(ids.shape)
    for index in np.ndindex(ids.shape):
        row, token = p[index], ids[index]
        order = np.argsort(-row)
        last = np.searchsorted(np.cumsum(row[order]), top_p * (1 - 1e-9))  # the first index reaching top_p
        kept = row >= row[order[min(last, len(row) - 1)]] if top_p < 1 else np.ones(len(row), bool)
        kept[token] = True
        out[index] = np.log(row[token]) - np.log(row[kept].sum())
    return out


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_log_probs_are_taken_under_the_sampling_distribution(tiny_dirs, top_p):
    """PPO's ratios are under the distribution the rollouts came from: softmax(logits / T), cut
    to the nucleus and renormalised (a NumPy re-derivation)."""
    from archer_jax.learners.actor import action_hidden

    policy = models.load_gpt2(tiny_dirs[0])
    actor = Actor(policy, token_baseline=True, rngs=nnx.Rngs(0))
    distribution = TokenDistribution(temperature=0.7, top_p=top_p)
    learner = Steps(actor, None, LearnerConfig(distribution=distribution), ppo=ppo.PPOConfig(),
                    matmul_precision="highest")
    state = learner.init_actor()
    rng = np.random.default_rng(2)
    obs = Tokens(rng.integers(1, 100, (2, 16)).astype(np.int32), np.ones((2, 16), np.int32))
    act = Tokens(rng.integers(1, 100, (2, 8)).astype(np.int32), np.ones((2, 8), np.int32))
    logprobs, _ = learner.token_stats(state, obs, act)
    with jax.default_matmul_precision("highest"):
        logits = np.asarray(policy.lm_logits(action_hidden(policy, obs, act)))
    np.testing.assert_allclose(logprobs, nucleus_logprobs(logits, act.ids, 0.7, top_p), rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_the_critic_baseline_is_the_critics_own_advantage(tiny_dirs, tokenizers):
    """critic_baseline: the turn level archer_hierarchical reads is min Q(s, a) - min V(s) of the
    critic, computed here from the critic's four heads in NumPy; without it, min Q(s, a)."""
    from tests.learners.conftest import critic_batch, make_modules

    actor, critic = make_modules(tiny_dirs, token_baseline=True)
    config = ppo.PPOConfig(adv_estimator="archer_hierarchical", critic_baseline=True)
    learner = Steps(actor, critic, LearnerConfig(), ppo=config, matmul_precision="highest")
    state = learner.init_critic()
    batch = critic_batch(tokenizers, n=8)
    heads = nnx.merge(learner.critic_graphdef, state.params)(batch.observation, batch.action)
    q1, q2, v1, v2 = (np.asarray(h, np.float64) for h in heads)
    np.testing.assert_allclose(learner.utterance_advantage(state.params, batch.observation, batch.action),
                               np.minimum(q1, q2) - np.minimum(v1, v2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(learner.utterance_q(state.params, batch.observation, batch.action),
                               np.minimum(q1, q2), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="critic_baseline: only archer_hierarchical reads the utterance critic, not adv_estimator 'gae'"):
        ppo.PPOConfig(adv_estimator="gae", critic_baseline=True)
