"""PPO's advantage estimators against NumPy re-derivations of the published loops.

The references below are written from RAGEN's and verl's published PyTorch code (``ragen/trainer/
core_algos.py``: ``compute_archer_advantage_return``, ``compute_gae_advantage_return_with_loss_mask``;
verl's ``masked_whiten`` and ``compute_grpo_outcome_advantage``), loop for loop, in NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

from archer_jax.learners import ppo_estimators


def np_masked_whiten(values, mask):
    mean = (values * mask).sum() / mask.sum()
    var = (((values - mean) ** 2) * mask).sum() / mask.sum()
    var = var * mask.sum() / (mask.sum() - 1)
    return (values - mean) / np.sqrt(var + 1e-8)


def np_archer_ragen(rewards, values, mask, gamma, lam, high_level_gamma, alpha):
    """RAGEN's loop: turn-level GAE at the non-zero reward positions, the mixed values, then
    token-level GAE over the valid positions, then whitening."""
    rewards = rewards.astype(np.float64)
    batch, _ = rewards.shape
    high = np.zeros_like(rewards)
    for b in range(batch):
        eos = np.nonzero(rewards[b] != 0)[0]
        last = 0.0
        for i in range(len(eos) - 1, -1, -1):
            pos = eos[i]
            next_high = high[b, eos[i + 1]] if i < len(eos) - 1 else 0.0
            delta = rewards[b, pos] + high_level_gamma * next_high - high[b, pos]
            last = delta + high_level_gamma * lam * last
            high[b, pos] = last + high[b, pos]
    combined = alpha * high + (1 - alpha) * values
    adv, ret = _np_gae_rows(rewards, combined, mask, gamma, lam)
    return np_masked_whiten(adv, mask), ret


def _np_gae_rows(rewards, values, mask, gamma, lam):
    """Unwhitened GAE with a loss mask (RAGEN/verl): the next value is read at the next valid position."""
    adv, ret = np.zeros_like(rewards, np.float64), np.zeros_like(rewards, np.float64)
    for b in range(rewards.shape[0]):
        valid = np.nonzero(mask[b])[0]
        last = 0.0
        for i in range(len(valid) - 1, -1, -1):
            pos = valid[i]
            next_value = values[b, valid[i + 1]] if i < len(valid) - 1 else 0.0
            delta = rewards[b, pos] + gamma * next_value - values[b, pos]
            last = delta + gamma * lam * last
            adv[b, pos] = last
            ret[b, pos] = last + values[b, pos]
    return adv, ret


def np_gae(rewards, values, mask, gamma, lam):
    """GAE with a loss mask (RAGEN/verl), whitened over the valid positions."""
    adv, ret = _np_gae_rows(rewards, values, mask, gamma, lam)
    return np_masked_whiten(adv, mask), ret


def np_grpo(rewards, mask, index, eps=1e-6):
    scores = rewards.sum(-1).astype(np.float64)
    out = scores.copy()
    for g in np.unique(index):
        members = np.nonzero(index == g)[0]
        if len(members) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = scores[members].mean(), scores[members].std(ddof=1)  # torch.std: unbiased
        out[members] = (scores[members] - mean) / (std + eps)
    return out[:, None] * mask


def np_hierarchical(q, values, mask, turn_end, lam):
    """Token GAE within each utterance: reward Q(s, a) at its last token, γ = 1, restart per turn."""
    adv, ret = np.zeros_like(values, np.float64), np.zeros_like(values, np.float64)
    for b in range(values.shape[0]):
        valid = list(np.nonzero(mask[b])[0])
        last, next_value = 0.0, 0.0
        for i in range(len(valid) - 1, -1, -1):
            pos = valid[i]
            if turn_end[b, pos]:
                last, next_value = 0.0, 0.0
            reward = q[b, pos] if turn_end[b, pos] else 0.0
            delta = reward + next_value - values[b, pos]
            last = delta + lam * last
            adv[b, pos], ret[b, pos] = last, last + values[b, pos]
            next_value = values[b, pos]
    return adv, ret


def random_batch(rng, batch=5, tokens=23):
    mask = (rng.random((batch, tokens)) < 0.8).astype(np.float32)
    mask[:, 0] = 1.0
    rewards = np.where(rng.random((batch, tokens)) < 0.2, rng.normal(size=(batch, tokens)), 0.0).astype(np.float32)
    rewards *= mask
    values = rng.normal(size=(batch, tokens)).astype(np.float32)
    return rewards, values, mask


def test_archer_ragen_on_ragens_own_example():
    """RAGEN's __main__ example: rewards 1 at tokens 4 and 9, values 0.1..1.0, γ = λ = 1, γ_H 0.95, α 0.1."""
    rewards = np.zeros((1, 10), np.float32)
    rewards[0, [4, 9]] = 1.0
    values = np.linspace(0.1, 1.0, 10, dtype=np.float32)[None]
    mask = np.ones((1, 10), np.float32)
    adv, ret = ppo_estimators.archer_ragen(rewards, values, mask, gamma=1.0, lam=1.0, high_level_gamma=0.95, alpha=0.1)
    want_adv, want_ret = np_archer_ragen(rewards, values, mask, 1.0, 1.0, 0.95, 0.1)
    np.testing.assert_allclose(np.asarray(adv), want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ret), want_ret, rtol=1e-5, atol=1e-6)
    # By hand: H_9 = 1 and H_4 = 1 + 0.95 * (1 + 1) * 1 = 2.9 (RAGEN's λ doubles the step). The mixed
    # values are 0.9 V except 0.1 * 2.9 + 0.9 * 0.5 = 0.74 at token 4 and 0.1 + 0.9 = 1.0 at token 9.
    # With γ = λ = 1 the GAE telescopes: R_t is the reward to go (2, then 1 after token 4) and the
    # unwhitened A_t = R_t - V_mix,t.
    np.testing.assert_allclose(np.asarray(ret)[0], [2.0] * 5 + [1.0] * 5, atol=1e-6)
    mixed = 0.9 * values[0]
    mixed[4], mixed[9] = 0.74, 1.0
    raw = want_ret[0] - mixed
    np.testing.assert_allclose(np_masked_whiten(raw[None], mask), np.asarray(adv), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_archer_ragen_on_random_batches(seed):
    rng = np.random.default_rng(seed)
    rewards, values, mask = random_batch(rng)
    gamma, lam, hg, alpha = rng.uniform(0.8, 1.0), rng.uniform(0.5, 1.0), rng.uniform(0.8, 1.0), rng.uniform(0, 1)
    adv, ret = ppo_estimators.archer_ragen(rewards, values, mask, gamma=gamma, lam=lam, high_level_gamma=hg, alpha=alpha)
    want_adv, want_ret = np_archer_ragen(rewards, values, mask, gamma, lam, hg, alpha)
    np.testing.assert_allclose(np.asarray(adv), want_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ret), want_ret, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_gae_with_a_loss_mask(seed):
    rng = np.random.default_rng(seed)
    rewards, values, mask = random_batch(rng)
    adv, ret = ppo_estimators.gae(rewards, values, mask, gamma=0.97, lam=0.9)
    want_adv, want_ret = np_gae(rewards, values, mask, 0.97, 0.9)
    np.testing.assert_allclose(np.asarray(adv), want_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ret), want_ret, rtol=1e-4, atol=1e-5)
    raw, _ = ppo_estimators.gae(rewards, values, mask, gamma=0.97, lam=0.9, whiten=False)
    np.testing.assert_allclose(np.asarray(raw), want_ret - values * mask, rtol=1e-4, atol=1e-5)


def test_gae_at_lambda_one_is_the_return_to_go_minus_the_value():
    rewards = np.array([[0, 0, -1, 0, 0, 0, -1]], np.float32)
    values = np.array([[0.5, 0.1, 0.2, 9.0, 0.3, 0.4, 0.6]], np.float32)
    mask = np.array([[1, 1, 1, 0, 1, 1, 1]], np.float32)  # token 3 is not the policy's
    _, ret = ppo_estimators.gae(rewards, values, mask, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(np.asarray(ret)[0], [-2, -2, -2, 0, -1, -1, -1], atol=1e-6)


def test_grpo_standardises_within_groups():
    rng = np.random.default_rng(3)
    rewards = rng.normal(size=(7, 6)).astype(np.float32)
    mask = (rng.random((7, 6)) < 0.7).astype(np.float32)
    group = np.array([0, 0, 0, 1, 1, 2, 0])  # group 2 has one member: its score is kept
    adv, ret = ppo_estimators.grpo(rewards, mask, group)
    np.testing.assert_allclose(np.asarray(adv), np_grpo(rewards, mask, group), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(adv), np.asarray(ret))


@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_archer_hierarchical(lam):
    rng = np.random.default_rng(4)
    mask = np.ones((3, 12), np.float32)
    mask[:, 10:] = 0
    turn_end = np.zeros((3, 12), np.float32)
    turn_end[:, [3, 6, 9]] = 1.0
    q = rng.normal(size=(3, 12)).astype(np.float32)
    values = rng.normal(size=(3, 12)).astype(np.float32)
    adv, ret = ppo_estimators.archer_hierarchical(q, values, mask, turn_end, lam=lam, whiten=False)
    want_adv, want_ret = np_hierarchical(q, values, mask, turn_end, lam)
    np.testing.assert_allclose(np.asarray(adv), want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ret), want_ret, rtol=1e-5, atol=1e-5)
    if lam == 1.0:  # A_t = Q(s, a) - b_t: each token's baseline is its own prefix's value only
        q_of_turn = np.repeat(q[:, [3, 6, 9]], [4, 3, 3], axis=1)
        np.testing.assert_allclose(np.asarray(adv)[:, :10], q_of_turn - values[:, :10], rtol=1e-5, atol=1e-5)


def test_masked_whiten_matches_verl():
    rng = np.random.default_rng(5)
    values = rng.normal(size=(4, 9)).astype(np.float32)
    mask = (rng.random((4, 9)) < 0.6).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ppo_estimators.masked_whiten(values, mask)), np_masked_whiten(values, mask),
                               rtol=1e-5, atol=1e-5)


def test_registry():
    assert set(ppo_estimators.ESTIMATORS) >= {"gae", "grpo", "archer_ragen", "archer_hierarchical"}
    assert ppo_estimators.get("grpo").needs_groups and not ppo_estimators.get("grpo").needs_values
    assert ppo_estimators.get("archer_hierarchical").needs_critic
    with pytest.raises(KeyError, match="registered: gae"):
        ppo_estimators.get("vtrace")
