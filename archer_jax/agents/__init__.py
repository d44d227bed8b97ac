"""The agents by name (``config.agent``): one module per algorithm, each with its config, its
compiled steps and its iteration (:class:`~archer_jax.agents.agent.Agent`).

    agent_class = agents.get("archer")
    config = agent_class.config_of(run_config)
    agent = agent_class(parts, config)
    states, seconds = agent.learn(states, replay, iteration)

Online agents: ArCHer, CHAI, filtered BC and token-level PPO (with GAE, GRPO or RAGEN's ArCHer
estimators). Offline agents (``offline_archer``, ``offline_bc``, ``offline_filtered_bc``) learn
from a dataset (:mod:`archer_jax.data`) and only evaluate in the envs. A new algorithm is a module
here and a line in :data:`AGENTS`, or :func:`register` from the user's own code
(``docs/algorithms.md``, "Adding an algorithm").
"""

from __future__ import annotations

from archer_jax.agents import archer, chai, filtered_bc, offline_archer, offline_bc, ppo
from archer_jax.agents.agent import Agent, NetworkSpec

AGENTS: dict[str, type[Agent]] = {a.name: a for a in (archer.ArCHer, chai.CHAI, filtered_bc.FilteredBC,
                                                      offline_archer.OfflineArCHer, offline_bc.OfflineBC,
                                                      offline_bc.OfflineFilteredBC, ppo.PPO)}


def register(agent: type[Agent]) -> None:
    """Makes ``config.agent = agent.name`` train ``agent`` (a subclass of :class:`Agent`)."""
    if agent.name in AGENTS:
        raise ValueError(f"agent {agent.name!r} is already registered")
    AGENTS[agent.name] = agent


def get(name: str) -> type[Agent]:
    """The agent ``name``; a KeyError lists the registered ones."""
    try:
        return AGENTS[name]
    except KeyError:
        raise KeyError(f"unknown agent {name!r}; registered: {', '.join(AGENTS)}") from None


__all__ = ["AGENTS", "Agent", "NetworkSpec", "get", "register"]
