"""Which agents' actor steps wait for the critic's warm-up, as each agent says of itself (the
run's warning for a warm-up as long as the run reads it)."""

from __future__ import annotations

import pytest

from archer_jax import agents, config as config_lib

# (agent, overrides, waits): ArCHer's actor and PPO's archer_hierarchical steps start after the
# warm-up; CHAI's policy is frozen; filtered BC and PPO's other estimators have no warm-up.
CASES = [
    ("archer", {}, True),
    ("archer", {"actor_steps": 0}, False),
    ("offline_archer", {"learner.actor_loss": "awr"}, True),
    ("chai", {}, False),
    ("ppo", {}, False),
    ("ppo", {"ppo.adv_estimator": "archer_hierarchical"}, True),
    ("filtered_bc", {}, False),
    ("offline_bc", {}, False),
]


def _case_id(case: tuple) -> str:
    agent, overrides, _ = case
    return "-".join([agent, *(f"{k}={v}" for k, v in overrides.items())])


@pytest.mark.parametrize("agent, overrides, waits", CASES, ids=[_case_id(case) for case in CASES])
def test_an_agent_says_whether_its_actor_waits_for_the_warmup(agent, overrides, waits):
    c = config_lib.base_config()
    c.agent = agent
    c.update_from_flattened_dict(overrides)
    agent_class = agents.get(agent)
    assert agent_class.actor_waits_for_warmup(agent_class.config_of(c)) is waits
