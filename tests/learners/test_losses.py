"""The losses and estimators against independent NumPy float64 re-derivations of the equations in
docs/algorithms.md."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from archer_jax import learners
from archer_jax.learners import losses

RTOL = 1e-5


def rand(rng, *shape):
    return rng.normal(size=shape)


def rel_err(ours, ref) -> float:
    return float(np.abs(np.asarray(ours, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-12))


def test_critic_td_loss_matches_numpy():
    rng = np.random.default_rng(0)
    n = 64
    q1, q2, v1, v2, nv1, nv2, pq1, pq2, r = (rand(rng, n) for _ in range(9))
    terminal = rng.integers(0, 2, n).astype(np.float64)
    gamma = 0.95
    # NumPy: L_Q = sum_i mean((Q_i - (r + gamma (1 - done) Vbar_i(s')))^2), L_V = sum_i mean((V_i - Qbar_i(s, a_pi))^2)
    y1 = r + gamma * (1 - terminal) * nv1
    y2 = r + gamma * (1 - terminal) * nv2
    expected_q = np.mean((q1 - y1) ** 2) + np.mean((q2 - y2) ** 2)
    expected_v = np.mean((v1 - pq1) ** 2) + np.mean((v2 - pq2) ** 2)

    f = lambda *a: jnp.asarray(np.stack(a), jnp.float32)  # noqa: E731
    online = losses.CriticValues(*f(q1, q2, v1, v2))
    z = np.zeros(n)
    next_target, pi_target = losses.CriticValues(*f(z, z, nv1, nv2)), losses.CriticValues(*f(pq1, pq2, z, z))
    q_targets = learners.td_targets(
        jnp.asarray(r, jnp.float32), jnp.asarray(terminal, jnp.float32), next_target.v1, next_target.v2, gamma
    )
    loss, aux = losses.critic_loss(online, q_targets, (pi_target.q1, pi_target.q2))
    assert rel_err(loss, expected_q + expected_v) < RTOL
    assert rel_err(aux["q_loss"], expected_q) < RTOL
    assert rel_err(aux["v_loss"], expected_v) < RTOL
    assert rel_err(aux["q_target"], y1) < RTOL


def test_truncation_bootstraps_and_terminal_does_not():
    reward, next_v = jnp.array([-1.0, -1.0]), jnp.array([3.0, 3.0])
    terminal = jnp.array([1.0, 0.0])  # row 1: cut by the time limit, not a terminal state
    y1, _ = learners.td_targets(reward, terminal, next_v, next_v, 0.5)
    np.testing.assert_allclose(np.asarray(y1), [-1.0, -1.0 + 0.5 * 3.0])


def test_critic_loss_gradient_flows_only_into_online_values():
    values = jnp.arange(4.0)
    def loss_of(online_scale, target_scale):
        v = losses.CriticValues(*(values * online_scale))
        t = losses.CriticValues(*(values * target_scale))
        return losses.critic_loss(v, learners.td_targets(jnp.ones(4), jnp.zeros(4), t.v1, t.v2, 0.9), (t.q1, t.q2))[0]
    assert jax.grad(loss_of, argnums=1)(1.0, 2.0) == 0.0
    assert jax.grad(loss_of, argnums=0)(1.0, 2.0) != 0.0


def test_actor_loss_matches_numpy():
    rng = np.random.default_rng(1)
    b, t = 16, 7
    q1, q2, v1, v2 = (rand(rng, b) for _ in range(4))
    logp = -np.abs(rand(rng, b, t))
    mask = (np.arange(t)[None] < rng.integers(1, t + 1, b)[:, None]).astype(np.float64)
    adv = np.minimum(q1, q2) - np.minimum(v1, v2)
    expected = -np.mean(adv * (logp * mask).sum(-1))

    a = learners.advantage(losses.CriticValues(*(jnp.asarray(x, jnp.float32) for x in (q1, q2, v1, v2))))
    assert rel_err(a, adv) < RTOL
    loss, _ = losses.actor_pg_loss(a, jnp.asarray(logp, jnp.float32), jnp.asarray(mask, jnp.float32))
    assert rel_err(loss, expected) < RTOL


def test_token_baseline_loss_matches_numpy():
    rng = np.random.default_rng(2)
    b, t = 8, 5
    adv, logp, base = rand(rng, b), -np.abs(rand(rng, b, t)), rand(rng, b, t)
    mask = (np.arange(t)[None] < rng.integers(1, t + 1, b)[:, None]).astype(np.float64)
    policy = -np.mean(((adv[:, None] - base) * logp * mask).sum(-1))
    mse = (((base - adv[:, None]) ** 2) * mask).sum() / mask.sum()
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    loss, aux = losses.actor_token_baseline_loss(f(adv), f(logp), f(base), f(mask), baseline_coef=0.5)
    assert rel_err(loss, policy + 0.5 * mse) < RTOL
    assert rel_err(aux["baseline_loss"], mse) < RTOL


def test_bc_nll_matches_numpy():
    rng = np.random.default_rng(3)
    logp = -np.abs(rand(rng, 6, 4))
    mask = np.array([[1, 1, 1, 1], [1, 0, 0, 0]] * 3, np.float64)
    loss, _ = losses.bc_nll_loss(jnp.asarray(logp, jnp.float32), jnp.asarray(mask, jnp.float32))
    assert rel_err(loss, -np.mean((logp * mask).sum(-1))) < RTOL


def test_polyak_closed_form():
    rng = np.random.default_rng(4)
    target = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}
    online = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}
    t32 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), target)
    o32 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), online)
    copied = learners.polyak(t32, o32, 1.0)
    kept = learners.polyak(t32, o32, 0.0)
    for k in target:
        np.testing.assert_array_equal(np.asarray(copied[k]), np.asarray(o32[k]))
        np.testing.assert_array_equal(np.asarray(kept[k]), np.asarray(t32[k]))
    tau, n = 0.1, 25
    moved = t32
    for _ in range(n):
        moved = learners.polyak(moved, o32, tau)
    for k in target:  # theta_bar_n = (1 - tau)^n theta_bar_0 + (1 - (1 - tau)^n) theta
        expected = (1 - tau) ** n * target[k] + (1 - (1 - tau) ** n) * online[k]
        assert rel_err(moved[k], expected) < RTOL


def test_chai_picks_the_best_pessimistic_q():
    q1 = jnp.array([[1.0, 5.0, 2.0], [0.0, -1.0, 3.0]])
    q2 = jnp.array([[1.5, 0.5, 1.9], [4.0, 9.0, -2.0]])
    # min: [[1, .5, 1.9], [0, -1, -2]] -> argmax [2, 0]
    np.testing.assert_array_equal(np.asarray(learners.chai_select(q1, q2)), [2, 0])


def test_filtered_bc_keeps_the_top_fraction():
    returns = np.array([-20, -5, -3, -19, -7, -3, -10, -11, -12, -13], float)
    np.testing.assert_array_equal(learners.filtered_bc_mask(returns, 0.1), returns >= -3)  # ties kept
    assert learners.filtered_bc_mask(returns, 0.3).sum() == 3
    assert learners.filtered_bc_mask(np.array([1.0]), 0.1).tolist() == [True]
    with pytest.raises(ValueError, match="fraction must be in"):
        learners.filtered_bc_mask(returns, 0.0)


def test_actor_losses_are_registered_by_name_with_one_signature_and_their_needs():
    assert set(learners.ACTOR_LOSSES) == {"actor_pg", "actor_token_baseline", "awr"}
    assert not learners.get_actor_loss("actor_pg").needs_baseline
    assert learners.get_actor_loss("actor_token_baseline").needs_baseline
    with pytest.raises(KeyError, match="unknown actor loss 'nope'; registered: actor_pg, actor_token_baseline, awr"):
        learners.get_actor_loss("nope")
    # Each entry, called with PolicyTerms, is its pure loss on the same arrays.
    rng = np.random.default_rng(5)
    adv, logp, base = (jnp.asarray(x, jnp.float32) for x in (rand(rng, 4), -np.abs(rand(rng, 4, 3)), rand(rng, 4, 3)))
    mask = jnp.asarray([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], jnp.float32)
    terms = learners.PolicyTerms(adv, logp, mask, base)
    assert float(learners.get_actor_loss("actor_pg")(terms)[0]) == float(losses.actor_pg_loss(adv, logp, mask)[0])
    expected = losses.actor_token_baseline_loss(adv, logp, base, mask)[0]
    assert float(learners.get_actor_loss("actor_token_baseline")(terms)[0]) == float(expected)
