"""Rollouts collected one iteration ahead (``rollout.staleness=1``): deterministic, resumed exactly
after ``kill -9``, the staleness of every transition recorded; refused by PPO and over several
processes, in one line."""

from __future__ import annotations

import signal
import subprocess

import numpy as np
import pytest

from archer_jax import config as config_lib
from archer_jax.errors import ConfigError
from archer_jax.learners.train_state import States
from archer_jax.rollout import snapshot
from archer_jax.run import preflight
from archer_jax.train import train_and_evaluate
from tests.run.test_train_app import (_complete_steps, _wait_for, assert_same_tree, cli, micro, micro_of, restored,
                                        without_time)

AHEAD = dict(iterations=4, save_freq=2, eval_freq=2, rollout__staleness=1)


@pytest.fixture(scope="module")
def ahead(tmp_path_factory):
    """Four iterations one ahead, without interruption."""
    workdir = tmp_path_factory.mktemp("ahead")
    c = micro(**AHEAD)
    summary = train_and_evaluate(c, workdir)
    return workdir, summary, restored(workdir, c)


@pytest.mark.slow
def test_every_transition_records_the_staleness_of_the_policy_that_played_it(ahead):
    _, summary, (_, _, replay, loop) = ahead
    c = micro(**AHEAD)
    per_rollout = c.rollout_size
    staleness = replay.columns["staleness"][: len(replay)]
    episodes = replay.columns["episode"][: len(replay)]
    # Rollout 1 is played before anything learns (no lag); rollouts 2..4 beside the iteration before.
    assert set(staleness[episodes < per_rollout]) == {0} and set(staleness[episodes >= per_rollout]) == {1}
    assert episodes.max() == 4 * per_rollout - 1 and len(replay) == summary["env_samples"]
    history = loop["history"]
    # Iteration 1 collects rollouts 1 and 2; iterations 2 and 3 the next one; iteration 4 none.
    assert [h["rollout/staleness"] for h in history[:3]] == [0.5, 1.0, 1.0] and "rollout/staleness" not in history[3]
    assert all("time/rollout_wait" in h for h in history[:3])


@pytest.mark.slow
def test_kill_9_then_the_same_command_resumes_exactly_as_the_run_that_went_straight(ahead, tmp_path):
    """The killed run also plays in 3 slots (continuous batching), the straight one all 4 dialogues
    at once: which slot a dialogue lands in changes nothing either."""
    reference = ahead[2]
    flags = ["--config.iterations=4", "--config.save_freq=2", "--config.eval_freq=2", "--config.rollout.staleness=1",
             "--config.rollout.slots=3"]
    process = subprocess.Popen(cli(tmp_path, *flags), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: 2 in _complete_steps(tmp_path), process)
    process.send_signal(signal.SIGKILL)
    process.wait()

    slotted = micro(**AHEAD, rollout__slots=3)
    summary = train_and_evaluate(slotted, tmp_path)
    assert summary["resumed_at_iteration"] in (2, 3)
    ref_actor, ref_critic, ref_replay, ref_loop = reference
    actor, critic, replay, loop = restored(tmp_path, slotted)
    assert_same_tree(actor.params, ref_actor.params)
    assert_same_tree(critic.params, ref_critic.params)
    assert without_time(loop["history"]) == without_time(ref_loop["history"])
    assert loop["evals"] == ref_loop["evals"] and loop["collected"] == ref_loop["collected"] == 4
    assert replay.columns["action"][: len(replay)] == ref_replay.columns["action"][: len(ref_replay)]


def test_snapshot_copies_what_acting_reads_so_donated_steps_cannot_free_it():
    import jax
    import jax.numpy as jnp

    from archer_jax.learners.train_state import TrainState

    params = {"w": jnp.ones(3)}
    state = TrainState(params=params, opt_state=("adam",), target={"w": jnp.zeros(3)}, step=jnp.zeros(()),
                       skipped=jnp.zeros(()), frozen={"base": jnp.full(2, 7.0)})
    copy = snapshot(States(state, None))
    assert copy.critic is None and copy.actor.opt_state is None
    assert copy.actor.frozen is state.frozen  # never donated: shared, not copied
    donate = jax.jit(lambda p: jax.tree.map(lambda x: x + 1, p), donate_argnums=0)
    donate(params)  # the original buffers may now be gone
    np.testing.assert_array_equal(np.asarray(copy.actor.params["w"]), np.ones(3))
    np.testing.assert_array_equal(np.asarray(copy.actor.target["w"]), np.zeros(3))


def test_ppo_and_several_processes_refuse_collection_ahead_in_one_line():
    c = micro_of("20q_ppo.py", rollout__staleness=1)
    with pytest.raises(ConfigError, match=r"^config.rollout.staleness: PPO learns on-policy .*set 0, not 1$"):
        config_lib.validate(c, weights=False)
    with pytest.raises(ConfigError, match=r"^config.rollout.staleness: 1 runs in one process, not 2; set 0"):
        preflight.check_rollout(micro(rollout__staleness=1), processes=2)
    preflight.check_rollout(micro(rollout__staleness=1), processes=1)
    with pytest.raises(ConfigError, match=r"^config.rollout.staleness: must be 0 \(serial\) or 1"):
        config_lib.validate(micro(rollout__staleness=2), weights=False)
    for agent in ("offline_archer", "offline_bc", "offline_filtered_bc"):  # no rollouts: it was ignored
        with pytest.raises(ConfigError, match=r"^config.rollout.staleness: an offline agent learns from its dataset "
                                              r"and plays no rollouts to collect ahead; set 0, not 1$"):
            config_lib.validate(micro_of("20q_offline.py", agent=agent, rollout__staleness=1), weights=False)
