"""The agents by name (``config.agent``): one module each, with its acting rule and its
iteration's updates (:class:`~archer_jax.agents.agent.Agent`).

    agent = agents.get("archer")
    states, seconds = agent.learn(run, states, replay, iteration)

Offline agents (``offline_archer``, ``offline_bc``, ``offline_filtered_bc``) learn from a dataset
(:mod:`archer_jax.data`) and only evaluate in the envs. A new algorithm (PPO, GRPO) is a module
with an ``AGENT`` and a line here, or :func:`register` from the user's own code.
"""

from __future__ import annotations

from archer_jax.agents import archer, chai, filtered_bc, offline_archer, offline_bc, ppo
from archer_jax.agents.agent import Agent

AGENTS: dict[str, Agent] = {a.name: a for a in (archer.AGENT, chai.AGENT, filtered_bc.AGENT, offline_archer.AGENT,
                                                offline_bc.BC, offline_bc.FILTERED_BC, ppo.AGENT)}


def register(agent: Agent) -> None:
    """Makes ``config.agent = agent.name`` train ``agent``."""
    if agent.name in AGENTS:
        raise ValueError(f"agent {agent.name!r} is already registered")
    AGENTS[agent.name] = agent


def get(name: str) -> Agent:
    """The agent ``name``; a KeyError lists the registered ones."""
    try:
        return AGENTS[name]
    except KeyError:
        raise KeyError(f"unknown agent {name!r}; registered: {', '.join(AGENTS)}") from None


__all__ = ["AGENTS", "Agent", "get", "register"]
