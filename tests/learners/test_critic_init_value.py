"""``critic_init_value``: the critic's Q and V heads start at a given value (their output bias),
the rest of the critic as built; an agent's fresh critic and its target take it."""

import jax
import numpy as np
import pytest
from flax import nnx

from archer_jax.config import ConfigError, validate
from archer_jax.agents.archer import Config
from archer_jax.learners import train_state
from archer_jax.learners.critic import HEADS, with_initial_value
from tests.learners import text_batches as batches
from tests.learners.conftest import OBSERVATIONS, ACTIONS, make_modules

VALUE = -7.25


def values(graphdef, params, tokenizer) -> np.ndarray:
    """``[4, batch]``: Q1, Q2, V1, V2 of the critic ``params`` on fixed texts."""
    critic = nnx.merge(graphdef, params)
    observation = batches.tokenize(tokenizer, OBSERVATIONS, 64)
    action = batches.tokenize(tokenizer, ACTIONS, 32)
    return np.stack([np.asarray(v) for v in critic(observation, action)])


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_every_head_starts_at_the_value_and_nothing_else_changes(tiny_dirs, tokenizers):
    _, critic = make_modules(tiny_dirs)
    graphdef, params = train_state.split_params(critic)
    shifted = with_initial_value(params, VALUE)
    flat = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    changed = [jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_flatten_with_path(shifted)[0]
               if not np.array_equal(np.asarray(leaf), np.asarray(flat[path]))]
    assert sorted(changed) == sorted(f"['{h}']['out']['bias'].value" for h in HEADS)
    # The output bias adds to every value: the heads' outputs move by exactly VALUE.
    before, after = values(graphdef, params, tokenizers[1]), values(graphdef, shifted, tokenizers[1])
    np.testing.assert_allclose(after - before, VALUE, atol=1e-5)
    assert np.abs(before).max() < 2.0  # the built heads start near 0, far from VALUE


def test_the_key_is_checked():
    with pytest.raises(ValueError, match="critic_init_value: must be finite"):
        Config(critic_init_value=float("nan"))


def test_a_critic_from_elsewhere_refuses_the_key(tmp_path):
    from tests.run.test_train_app import micro

    c = micro(critic_init_value=-3.0)
    c.model.critic_init = str(tmp_path / "critic_init.safetensors")
    with pytest.raises(ConfigError, match="config.critic_init_value: the critic starts from model.critic_init's"):
        validate(c)


def test_an_agents_fresh_critic_and_its_target_start_there(tmp_path):
    from archer_jax.train import build_agent
    from tests.run.test_train_app import micro

    agent = build_agent(validate(micro(critic_init_value=VALUE, sft__steps=0)), tmp_path / "run")
    try:
        critic = agent.init_states().critic
        built = agent.networks.initial_critic_params()
        for tree in (critic.params, critic.target):
            for head in HEADS:
                np.testing.assert_array_equal(np.asarray(tree[head]["out"]["bias"][...]), [VALUE])
            np.testing.assert_array_equal(np.asarray(tree["q1"]["out"]["kernel"][...]),
                                          np.asarray(built["q1"]["out"]["kernel"][...]))
        # Another run's critic is taken as it is.
        again = agent.init_critic(built)
        np.testing.assert_array_equal(np.asarray(again.params["v2"]["out"]["bias"][...]),
                                      np.asarray(built["v2"]["out"]["bias"][...]))
    finally:
        agent.parts.close()
