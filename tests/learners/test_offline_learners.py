"""Offline ArCHer's losses and steps (IQL critic, AWR actor) against independent re-derivations:
NumPy float64 for the losses, a plain autodiff + optax step for the jitted learner steps."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from archer_jax import learners
from archer_jax.learners import losses, offline_archer, train_state
from archer_jax.agents.steps import Steps
from tests.learners.conftest import actor_batch, critic_batch, make_modules

RTOL = 1e-5


def rel_err(ours, ref) -> float:
    return float(np.abs(np.asarray(ours, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-12))


def np_expectile(diff, tau):
    # The asymmetric square of IQL written out: tau * d^2 above the prediction, (1 - tau) * d^2 below.
    return np.mean([(tau if d > 0 else 1 - tau) * d * d for d in diff])


@pytest.mark.parametrize("tau", [0.9, 0.5, 0.3])
def test_expectile_loss_matches_numpy(tau):
    diff = np.random.default_rng(0).normal(size=257)
    assert rel_err(losses.expectile_loss(jnp.asarray(diff, jnp.float32), tau), np_expectile(diff, tau)) < RTOL
    if tau == 0.5:  # the SARSA variant: half the MSE, whose minimiser is the mean
        assert rel_err(losses.expectile_loss(jnp.asarray(diff, jnp.float32), tau), 0.5 * np.mean(diff**2)) < RTOL


def test_expectile_minimiser_is_the_expectile():
    # Minimising over a constant v: tau = 0.5 gives the mean, tau = 0.9 a value above it.
    samples = np.random.default_rng(1).normal(size=400)
    grid = np.linspace(-1.5, 1.5, 3001)
    x = jnp.asarray(samples, jnp.float32)
    argmin = {t: grid[int(jnp.argmin(jax.vmap(lambda v: losses.expectile_loss(x - v, t))(jnp.asarray(grid, jnp.float32))))]
              for t in (0.5, 0.9)}
    assert abs(argmin[0.5] - samples.mean()) < 2e-3
    assert argmin[0.9] > samples.mean() + 0.5  # the 0.9-expectile of N(0, 1) is about 0.86


@pytest.mark.parametrize("v_target", ["min", "paired"])
def test_iql_critic_loss_matches_numpy(v_target):
    rng = np.random.default_rng(2)
    n, gamma, tau = 64, 0.99, 0.9
    q1, q2, v1, v2, nv1, nv2, tq1, tq2, r = (rng.normal(size=n) for _ in range(9))
    terminal = rng.integers(0, 2, n).astype(np.float64)
    y1, y2 = r + gamma * (1 - terminal) * nv1, r + gamma * (1 - terminal) * nv2
    t1, t2 = (np.minimum(tq1, tq2),) * 2 if v_target == "min" else (tq1, tq2)
    expected_q = np.mean((q1 - y1) ** 2) + np.mean((q2 - y2) ** 2)
    expected_v = np_expectile(t1 - v1, tau) + np_expectile(t2 - v2, tau)

    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    online = losses.CriticValues(f(q1), f(q2), f(v1), f(v2))
    q_targets = learners.td_targets(f(r), f(terminal), f(nv1), f(nv2), gamma)
    v_targets = offline_archer.iql_v_targets(f(tq1), f(tq2), v_target)
    loss, aux = losses.iql_critic_loss(online, q_targets, v_targets, tau)
    assert rel_err(aux["q_loss"], expected_q) < RTOL
    assert rel_err(aux["v_loss"], expected_v) < RTOL
    assert rel_err(loss, expected_q + expected_v) < RTOL


def test_awr_loss_matches_numpy_and_clips():
    rng = np.random.default_rng(3)
    adv = np.array([-2.0, 0.0, 0.5, 6.0])
    logp = -np.abs(rng.normal(size=(4, 5)))
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]], np.float64)
    beta, clip = 0.7, 20.0
    weights = np.minimum(np.exp(beta * adv), clip)  # exp(4.2) = 66.7 is clipped to 20
    expected = -np.mean(weights * (logp * mask).sum(-1))
    loss, aux = losses.awr_loss(*(jnp.asarray(x, jnp.float32) for x in (adv, logp, mask)), beta, clip)
    assert rel_err(loss, expected) < RTOL
    assert rel_err(aux["awr_weight"], weights) < RTOL and float(aux["awr_weight"][3]) == clip
    # The registry entry takes its β and clip from the learner config's fields.
    entry = learners.get_actor_loss("awr")
    assert entry.options == ("awr_beta", "awr_clip") and not entry.needs_baseline
    terms = learners.PolicyTerms(*(jnp.asarray(x, jnp.float32) for x in (adv, logp, mask)), None)
    assert float(entry(terms, awr_beta=beta, awr_clip=clip)[0]) == float(loss)
    # No gradient flows through the weights: d loss / d logp_t = -w / batch on the action's tokens.
    grad = jax.grad(lambda lp: losses.awr_loss(jnp.asarray(adv, jnp.float32), lp, jnp.asarray(mask, jnp.float32),
                                               beta, clip)[0])(jnp.asarray(logp, jnp.float32))
    np.testing.assert_allclose(np.asarray(grad), -(weights[:, None] * mask) / 4, rtol=1e-5)


def _as_numpy(tree):
    return jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get(tree))


# One learner for both steps (one build, two compilations): the IQL critic step with expectile 0.8
# and the AWR actor step with β 2 and clip 3.
CONFIG = learners.LearnerConfig(critic_lr=1e-3, actor_lr=1e-3, gamma=0.9, tau=0.2, actor_loss="awr")
IQL = offline_archer.IQLConfig(expectile=0.8, awr_beta=2.0, awr_clip=3.0)


@pytest.fixture(scope="module")
def learner(tiny_dirs):
    return Steps(*make_modules(tiny_dirs), CONFIG, IQL)


def _max_abs_err(a, b) -> float:
    return max(jax.tree.leaves(jax.tree.map(lambda x, y: np.abs(x - y).max(), _as_numpy(a), _as_numpy(b))))


def _adam_step(params, grads, lr):
    tx = optax.chain(optax.clip_by_global_norm(CONFIG.max_grad_norm), optax.adam(lr))
    updates, _ = tx.update(grads, tx.init(params), params)
    return optax.apply_updates(params, updates)


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_iql_critic_step_equals_an_independent_autodiff_step(learner, tiny_dirs, tokenizers):
    batch = critic_batch(tokenizers)
    new, metrics = learner.iql_critic_step(learner.init_critic(), batch)

    # The reference: the IQL loss written out on the module, jax.grad, clip, Adam, Polyak.
    _, critic = make_modules(tiny_dirs)
    graphdef, params = train_state.split_params(critic)
    target = nnx.merge(graphdef, params)

    def loss(p):
        online = nnx.merge(graphdef, p)(batch.observation, batch.action)
        e_next, e_s, e_a = target.embed(batch.next_observation), target.embed(batch.observation), target.embed(batch.action)
        nv1, nv2 = target.v_values(e_next)
        keep = 0.9 * (1 - jnp.asarray(batch.terminal))
        tq = jnp.minimum(*target.q_values(e_s, e_a))  # Q̄ of the dataset's action, min of two
        sq = lambda d, t: jnp.mean(jnp.where(d > 0, t, 1 - t) * d**2)  # noqa: E731
        y1, y2 = batch.reward + keep * nv1, batch.reward + keep * nv2
        return (jnp.mean((online.q1 - y1) ** 2) + jnp.mean((online.q2 - y2) ** 2)
                + sq(tq - online.v1, 0.8) + sq(tq - online.v2, 0.8))

    ref_loss, grads = jax.jit(jax.value_and_grad(loss))(params)
    ref_params = _adam_step(params, grads, CONFIG.critic_lr)
    ref_target = jax.tree.map(lambda t, p: 0.8 * t + 0.2 * p, params, ref_params)
    assert abs(float(metrics["loss"]) - float(ref_loss)) < 1e-5 * max(1.0, abs(float(ref_loss)))
    # Adam moves each parameter by about lr whatever its gradient: rounding in near-zero gradients
    # shows at a small fraction of lr (tests/learners/test_learner.py), the step itself at lr.
    assert _max_abs_err(new.params, ref_params) < 1e-2 * CONFIG.critic_lr
    assert _max_abs_err(new.target, ref_target) < 1e-2 * CONFIG.critic_lr
    assert _max_abs_err(new.params, params) > 0.5 * CONFIG.critic_lr  # the step moved them


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_awr_actor_step_equals_an_independent_autodiff_step(learner, tiny_dirs, tokenizers):
    batch = actor_batch(tokenizers)
    critic_state = learner.init_critic()
    new, metrics = learner.actor_step(learner.init_actor(), critic_state.params, batch)

    actor, critic = make_modules(tiny_dirs)
    graphdef, params = train_state.split_params(actor)
    values = critic(batch.critic_observation, batch.critic_action)
    adv = jnp.minimum(values.q1, values.q2) - jnp.minimum(values.v1, values.v2)
    weights = jnp.minimum(jnp.exp(2.0 * adv), 3.0)

    def loss(p):
        token_logprobs, _ = nnx.merge(graphdef, p)(batch.observation, batch.action)
        return -jnp.mean(weights * jnp.sum(token_logprobs * batch.action.mask, axis=-1))

    ref_loss, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert abs(float(metrics["loss"]) - float(ref_loss)) < 1e-5 * max(1.0, abs(float(ref_loss)))
    assert _max_abs_err(new.params, _adam_step(params, grads, CONFIG.actor_lr)) < 1e-2 * CONFIG.actor_lr


def test_offline_learner_config_is_checked():
    with pytest.raises(ValueError, match=r"expectile: must be in \(0, 1\)"):
        offline_archer.IQLConfig(expectile=1.0)
    with pytest.raises(ValueError, match="iql_v_target: unknown value 'max'; known: min, paired"):
        offline_archer.IQLConfig(iql_v_target="max")
