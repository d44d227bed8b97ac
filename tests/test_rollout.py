"""Rollouts through the env pool: transitions, endings, the max_turns cut, summaries."""

import functools
import random

import numpy as np
import pytest

from archer_jax import rollout
from archer_jax.envs.experts import expert
from archer_jax.envs.pool import EnvPool
from archer_jax.envs.twenty_questions import SUBSET, TwentyQuestionsSubset


def test_optimal_expert_episodes_are_recorded_turn_by_turn():
    player = expert("optimal", universe=SUBSET)
    with EnvPool(functools.partial(TwentyQuestionsSubset), num_envs=6) as pool:
        episodes = rollout.play(pool, lambda obs, turn, games: [player.act(o) for o in obs], seeds=range(5), max_turns=20)
    assert len(episodes) == 5
    for e in episodes:
        assert e.success and not e.truncated and e.terminals[-1] and not any(e.terminals[:-1])
        # The reward is -1 per turn and 0 on the winning one; each next observation is the next
        # turn's observation and extends it by one line.
        assert e.rewards == [-1.0] * (len(e) - 1) + [0.0] and e.total_return == -(len(e) - 1)
        assert e.observations[0] == "Questions:\n"
        assert e.observations[1:] == e.next_observations[:-1]
        for obs, act, nxt in zip(e.observations, e.actions, e.next_observations):
            assert nxt.startswith(obs + act + " ")
    summary = rollout.summarize(episodes)
    assert summary["success"] == 1.0 and summary["invalid"] == 0.0
    assert summary["return"] == pytest.approx(np.mean([e.total_return for e in episodes]))
    assert summary["length"] == pytest.approx(np.mean([len(e) for e in episodes]))


def test_episodes_still_running_after_max_turns_are_cut_as_truncated():
    calls = []

    def stubborn(obs, turn, games):
        calls.append(len(obs))
        return ["Is it alive?"] * len(obs)  # never guesses

    with EnvPool(functools.partial(TwentyQuestionsSubset), num_envs=3) as pool:
        episodes = rollout.play(pool, stubborn, seeds=[1, 2, 3], max_turns=4)
    assert calls == [3, 3, 3, 3]
    for e in episodes:
        assert len(e) == 4 and e.truncated and not e.success and not any(e.terminals)
        assert e.total_return == -4.0


def test_bad_act_and_too_many_episodes_fail_clearly():
    with EnvPool(functools.partial(TwentyQuestionsSubset), num_envs=2) as pool:
        with pytest.raises(ValueError, match="3 episodes need 3 envs; the pool has 2"):
            rollout.play(pool, lambda obs, t, games: obs, seeds=[0, 1, 2], max_turns=3)
        with pytest.raises(ValueError, match="act returned 1 actions for 2 observations"):
            rollout.play(pool, lambda obs, t, games: ["x"], seeds=[0, 1], max_turns=3)


def test_continuous_batching_refills_slots_and_plays_the_same_dialogues():
    """With ``slots``, a slot whose dialogue ends takes the next game at once, the rows of one call
    are at different turns, and the episodes (in the order of the seeds) are those of playing all
    games side by side, since the acting rule depends only on each dialogue's game and turn."""
    def act(calls):
        def chosen(obs, turn, games):
            turns = turn if isinstance(turn, list) else [turn] * len(obs)
            calls.append((list(games), turns))
            # Game g guesses its secret at turn g % 4 (the env draws it from its seed), else asks.
            return [f"Is it {secret(seeds[g])}?" if t == g % 4 else "Is it alive?" for g, t in zip(games, turns)]
        return chosen

    objects = TwentyQuestionsSubset().objects
    secret = lambda seed: random.Random(seed).choice(objects).name  # noqa: E731
    seeds = list(range(7))
    side_by_side, slotted = [], []
    with EnvPool(functools.partial(TwentyQuestionsSubset), num_envs=7) as pool:
        reference = rollout.play(pool, act(side_by_side), seeds=seeds, max_turns=5)
        finished = []
        episodes = rollout.play(pool, act(slotted), seeds=seeds, max_turns=5, slots=3, progress=finished.append)
    assert [(e.actions, e.rewards, e.success, e.truncated) for e in episodes] == \
        [(e.actions, e.rewards, e.success, e.truncated) for e in reference]
    # Each game ended at its own turn: a win at turn g % 4.
    assert [(len(e), e.success) for e in reference] == [(g % 4 + 1, True) for g in range(7)]
    # Side by side, every call's rows are at the same turn, and it counts on after games end.
    assert [turns[0] for _, turns in side_by_side] == [0, 1, 2, 3] and all(len(set(t)) == 1 for _, t in side_by_side)
    assert all(len(games) <= 3 for games, _ in slotted) and max(len(g) for g, _ in side_by_side) == 7
    assert any(len(set(turns)) > 1 for _, turns in slotted)  # rows at different turns in one call
    assert sum(len(g) for g, _ in slotted) == sum(len(g) for g, _ in side_by_side)  # no call for a finished game
    assert finished[-1] == 7 and finished == sorted(finished)
    with EnvPool(functools.partial(TwentyQuestionsSubset), num_envs=2) as pool:
        with pytest.raises(ValueError, match=r"3 episodes need 3 envs; the pool has 2 \(rollout.slots=3 plays 3 at once\)"):
            rollout.play(pool, act([]), seeds=seeds, max_turns=3, slots=3)


@pytest.mark.parametrize("turn_limit, env_turns, terminal", [
    ("game", 4, True),  # the game's own limit: it ends there (Twenty Questions shows every turn)
    ("cut", 4, False),  # configured a cut: the game would go on, the TD target bootstraps
    ("end", 20, True),  # the loop's cut at max_turns, configured to end the game
    ("game", 20, False),  # the loop's cut below the game's own limit: a truncation
])
def test_what_the_turn_limit_is_follows_the_game_and_the_config(turn_limit, env_turns, terminal):
    """A dialogue that reaches the turn limit ends with ``at_limit``; its last transition is
    terminal where the limit ends the game, else the episode is a truncation."""
    with EnvPool(functools.partial(TwentyQuestionsSubset, max_turns=env_turns), num_envs=2) as pool:
        episodes = rollout.play(pool, lambda obs, turn, games: ["Is it alive?"] * len(obs), seeds=[1, 2],
                                max_turns=4, turn_limit=turn_limit)
    for e in episodes:
        assert len(e) == 4 and e.at_limit and not e.success
        assert e.terminals == [False, False, False, terminal] and e.truncated == (not terminal)
