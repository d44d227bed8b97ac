"""Real learning on a two-turn text task whose values are known in closed form.

Two turns; in each the agent says "yes" (reward 0) or "no" (reward -1); the episode ends after
the second turn. Under the uniform policy, with discount g:
  V(s1) = -0.5,  Q(s1, yes) = 0,  Q(s1, no) = -1,
  Q(s0, yes) = -0.5 g,  Q(s0, no) = -1 - 0.5 g,  V(s0) = -0.5 - 0.5 g.
The critic learns these by TD with its target network (a_pi enumerating both actions, i.e. the
uniform policy); the actor, driven by the learned advantage, then prefers "yes".
"""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from archer_jax import learners
from tests.learners import text_batches as batches
from tests.learners.conftest import make_modules
from archer_jax.agents.steps import Steps

GAMMA = 0.9
S0 = "Questions:\n"
S1 = {a: f"{S0}Is it {a}?\n" for a in ("yes", "no")}
REWARD = {"yes": 0.0, "no": -1.0}
TRUE_Q = {(S0, "yes"): -0.5 * GAMMA, (S0, "no"): -1 - 0.5 * GAMMA}
TRUE_V = {S0: -0.5 - 0.5 * GAMMA}
for s in S1.values():
    TRUE_Q[(s, "yes")], TRUE_Q[(s, "no")], TRUE_V[s] = 0.0, -1.0, -0.5


def transitions():
    rows = [(S0, a, REWARD[a], S1[a], 0.0) for a in ("yes", "no")]
    rows += [(s, a, REWARD[a], "", 1.0) for s in S1.values() for a in ("yes", "no")]
    return [row + (pi,) for row in rows for pi in ("yes", "no")]  # a_pi: both, i.e. uniform


@pytest.mark.slow  # over 10 s on 2 cores (it compiles learner or sampler programs): the fast tier skips it
def test_critic_learns_the_true_values_and_the_actor_the_better_action(tiny_dirs, tokenizers):
    policy_tok, critic_tok = tokenizers
    actor, critic = make_modules(tiny_dirs, seed=1)
    config = learners.LearnerConfig(gamma=GAMMA, tau=0.1, critic_lr=1e-3, actor_lr=3e-4, max_grad_norm=1.0)
    learner = Steps(actor, critic, config)
    obs, act, rew, nxt, term, pi = zip(*transitions())
    batch = batches.critic_batch(critic_tok, obs, act, nxt, pi, rew, term)

    state = learner.init_critic()
    for _ in range(400):
        state, metrics = learner.critic_step(state, batch)
    trained = nnx.merge(learner.critic_graphdef, state.params)
    keys = list(TRUE_Q)
    o = batches.tokenize(critic_tok, [k[0] for k in keys], 64)
    a = batches.tokenize(critic_tok, [k[1] for k in keys], 64)
    values = trained(learners.Tokens(jnp.asarray(o.ids), jnp.asarray(o.mask)),
                     learners.Tokens(jnp.asarray(a.ids), jnp.asarray(a.mask)))
    q = np.minimum(np.asarray(values.q1), np.asarray(values.q2))
    v = np.minimum(np.asarray(values.v1), np.asarray(values.v2))
    true_q = np.array([TRUE_Q[k] for k in keys])
    true_v = np.array([TRUE_V[k[0]] for k in keys])
    print(f"critic after 400 steps: max |Q - Q*| = {np.abs(q - true_q).max():.4f}, max |V - V*| = {np.abs(v - true_v).max():.4f}")
    assert np.abs(q - true_q).max() < 0.1, (q, true_q)
    assert np.abs(v - true_v).max() < 0.1, (v, true_v)

    # The actor: fresh a_pi in {yes, no} at s0, advantage from the learned critic.
    observations = [S0] * 8
    answers = ["yes", "no"] * 4
    bc = batches.bc_batch(policy_tok, observations, answers)
    actor_batch = batches.actor_batch(
        batches.tokenize(policy_tok, observations, 64),
        bc.action, critic_tok, observations, answers,
    )

    def log_odds(actor_state):  # log pi(yes\n | s0) - log pi(no\n | s0)
        model = nnx.merge(learner.actor_graphdef, actor_state.params)
        logp, _ = model(learners.Tokens(*(jnp.asarray(x[:2]) for x in bc.observation)),
                        learners.Tokens(*(jnp.asarray(x[:2]) for x in bc.action)))
        total = np.asarray(logp).sum(-1)
        return float(total[0] - total[1])

    actor_state = learner.init_actor()
    before = log_odds(actor_state)
    for _ in range(15):
        actor_state, metrics = learner.actor_step(actor_state, state.params, actor_batch)
    after = log_odds(actor_state)
    print(f"actor: log pi(yes)/pi(no) at s0 {before:.3f} -> {after:.3f} after 15 steps")
    assert float(metrics["advantage/max"]) > 0.3 and float(metrics["advantage/min"]) < -0.3
    assert after > before + 2.0, (before, after)  # odds of the better answer up by e^2 or more
