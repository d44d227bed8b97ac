"""Rollouts: a batch of dialogues played in lockstep through an env pool by an acting function.

    episodes = rollout.play(pool, act, seeds=range(32), max_turns=20)   # split="eval" for evaluations
    rollout.summarize(episodes)   # {"return": ..., "success": ..., "length": ..., "worker_restarts": ...}

``act(observations, turn, games) -> actions`` is called once per turn with the observations of
the dialogues still running and their positions in ``seeds`` (the sampler, CHAI, or a scripted
expert behind it; the sampler keys each dialogue's samples by its game and turn, so they do not
depend on which other games are still running). With ``slots`` (continuous batching) the rows
are at different turns, and ``turn`` is a list of them. An action of None
ends its dialogue there, untaken (a walkthrough that has run out, an expert with nothing to say).
This is the library's one play loop: training rollouts, evaluations and SFT demonstrations all
come from it.

A run's rollouts and evaluations play an agent's acting rule on its parts' env pool, and store
the transitions in its replay buffer:

    episodes = rollout.collect(parts, agent.act, states, iteration)
    rollout.store(parts, replay, episodes, first_episode)
    episodes = rollout.evaluate(parts, agent.act, states)
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from collections.abc import Callable, Sequence

import jax
import numpy as np

from archer_jax.envs.pool import EnvPool
from archer_jax.learners.train_state import States
from archer_jax.parts import EVAL, ROLLOUT, Parts
from archer_jax.records.progress import progress_bar
from archer_jax.replay import ReplayBuffer
from archer_jax.runtime.distributed import concat_gathered, host_share
from archer_jax.sampling.decoding import row_keys

Act = Callable[[list[str], "int | list[int]", list[int]], Sequence[str | None]]
# An agent's acting rule: (states, observations, key, greedy, rows) -> one utterance each.
AgentAct = Callable[["States", Sequence[str], jax.Array, bool, Sequence[int]], list[str]]
EVAL_SEED = 10**6  # evaluation dialogues use fixed seeds, the same every evaluation


@dataclasses.dataclass
class Episode:
    """One dialogue: its transitions and how it ended."""

    observations: list[str] = dataclasses.field(default_factory=list)
    actions: list[str] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    next_observations: list[str] = dataclasses.field(default_factory=list)
    terminals: list[bool] = dataclasses.field(default_factory=list)  # the game ended (no bootstrap)
    success: bool = False
    truncated: bool = False  # cut where the game goes on: a worker restart, a limit that only cuts
    at_limit: bool = False  # ended by the turn limit (the env's, or max_turns here)
    invalid: int = 0  # actions the env answered as invalid
    # Env worker restarts while its batch was played (EnvPool.restarts): each batch charges them
    # to its first episode, so summing over episodes (hosts' batches included) counts restarts.
    worker_restarts: int = 0
    # Updates the policy that played it lags behind the serial schedule's (config.rollout.staleness).
    staleness: int = 0

    @property
    def total_return(self) -> float:
        return float(np.sum(self.rewards)) if self.rewards else 0.0

    def __len__(self) -> int:
        return len(self.actions)


def play(
    pool: EnvPool,
    act: Act,
    seeds: Sequence[int],
    *,
    max_turns: int,
    progress: Callable[[int], None] | None = None,
    split: str = "train",
    to_env: Callable[[str], str] | None = None,
    slots: int = 0,
    turn_limit: str = "game",
) -> list[Episode]:
    """Plays one episode of each of ``seeds`` on ``split``'s tasks ("train", or "eval" for
    evaluations: see :mod:`archer_jax.envs.base`), in the order of ``seeds``.

    ``slots`` 0 (or at least ``len(seeds)``) plays them side by side in the first ``len(seeds)``
    envs of ``pool``, turn by turn, and calls ``act`` with the turn number and ``progress(turn)``
    after each turn. ``slots`` n keeps n dialogues running in the first n envs: a slot whose
    dialogue ends takes the next game at once (continuous batching), ``act`` gets each row's own
    turn (a list), and ``progress(dialogues finished)`` is called as they end.

    Envs end their own episodes; any still running after ``max_turns`` turns is cut there as
    truncated, as is one whose action is None. ``to_env`` maps an utterance to the action the env
    receives (e.g. the question in a JSON answer); the episode keeps the utterance itself.

    ``turn_limit`` says what an episode that reached the turn limit (``info.at_limit``, or the cut at
    ``max_turns``) is: ``"game"`` the env's word (its ``info.truncated``; the cut at ``max_turns`` a
    truncation), ``"end"`` terminal, ``"cut"`` truncated (``config.env.turn_limit``). A worker
    restart's episode is truncated whatever it says.
    """
    n = len(seeds)
    width = n if not slots or slots >= n else slots
    if width > pool.num_envs:
        raise ValueError(f"{width} episodes need {width} envs; the pool has {pool.num_envs}"
                         + ("" if width == n else f" (rollout.slots={slots} plays {width} at once)"))
    restarts = pool.restarts
    episodes = [Episode() for _ in range(n)]
    game = list(range(width))  # the game each slot plays (None: no game left for it)
    turn = [0] * width
    waiting = iter(range(width, n))
    observations = pool.reset([int(seeds[g]) for g in game], indices=range(width), split=split)
    lockstep, finished, rounds = width == n, 0, 0
    while True:
        running = [i for i in range(width) if game[i] is not None]
        if not running or (lockstep and rounds == max_turns):
            break
        turns = rounds if lockstep else [turn[i] for i in running]  # side by side: every row at the same turn
        actions = list(act([observations[i] for i in running], turns, [game[i] for i in running]))
        if len(actions) != len(running):
            raise ValueError(f"act returned {len(actions)} actions for {len(running)} observations")
        step_actions: list[str | None] = [None] * pool.num_envs
        for i, action in zip(running, actions):
            step_actions[i] = action if action is None or to_env is None else to_env(action)
        results = pool.step(step_actions)
        ended = []
        for i, action in zip(running, actions):
            result, episode = results[i], episodes[game[i]]
            turn[i] += 1
            if action is None:
                episode.truncated = True
                ended.append(i)
                continue
            episode.observations.append(observations[i])
            episode.actions.append(action)
            episode.rewards.append(float(result.reward))
            episode.next_observations.append(result.observation)
            episode.invalid += bool(result.info.invalid)
            observations[i] = result.observation
            truncated, at_limit = bool(result.info.truncated), bool(result.info.at_limit)
            if not result.done and turn[i] == max_turns:  # cut at the turn limit here
                truncated, at_limit = True, True
            if at_limit and turn_limit != "game" and not result.info.extra.get("worker_restarted"):
                truncated = turn_limit == "cut"
            episode.terminals.append((result.done or at_limit) and not truncated)
            if result.done or at_limit:
                episode.success, episode.truncated = bool(result.info.success), truncated
                episode.at_limit = at_limit
                ended.append(i)
        rounds += 1
        if lockstep:
            for i in ended:
                game[i] = None
            if progress is not None:
                progress(rounds)
            continue
        refill = []
        for i in ended:
            game[i], turn[i] = next(waiting, None), 0
            if game[i] is not None:
                refill.append(i)
        if refill:
            for i, observation in zip(refill, pool.reset([int(seeds[game[i]]) for i in refill], indices=refill,
                                                          split=split)):
                observations[i] = observation
        finished += len(ended)
        if progress is not None and ended:
            progress(finished)
    if episodes:
        episodes[0].worker_restarts = pool.restarts - restarts
    return episodes


def summarize(episodes: Sequence[Episode]) -> dict[str, float]:
    """Mean return, success rate, length and invalid-action rate of ``episodes``, and the env
    worker restarts while they were played (a count; the train loop reports it as
    ``rollout/worker_restarts``)."""
    lengths = np.array([len(e) for e in episodes], np.float64)
    return {
        "return": float(np.mean([e.total_return for e in episodes])),
        "success": float(np.mean([e.success for e in episodes])),
        "length": float(lengths.mean()),
        "invalid": float(sum(e.invalid for e in episodes) / max(lengths.sum(), 1)),
        "worker_restarts": float(sum(e.worker_restarts for e in episodes)),
    }


def _play(parts: Parts, act: AgentAct, states: States, seeds: Sequence[int], key, greedy: bool, label: str,
          split: str = "train", cancel: threading.Event | None = None) -> list[Episode]:
    """Plays ``seeds`` on ``split``'s tasks (this host its share,
    :func:`archer_jax.runtime.distributed.host_share`); every host returns all the episodes, in the order
    of ``seeds``. Dialogue ``g`` samples with keys folded with ``g``, whichever host plays it."""
    share = host_share(len(seeds))
    slots = parts.config.rollout.slots
    lockstep = not slots or slots >= len(share)

    def turn_act(observations: list[str], turn: int | list[int], games: list[int]) -> list[str]:
        rows = [share.start + g for g in games]
        keys = jax.random.fold_in(key, turn) if lockstep else row_keys(key, turn)  # each row its own turn's key
        return act(states, observations, keys, greedy, rows)

    max_turns = parts.config.env.max_turns
    total, unit = (max_turns, "turn") if lockstep else (len(share), "dialogue")
    with progress_bar(total, label, unit) as bar:  # tqdm on a terminal, else a line every 30 s
        def progress(done: int) -> None:
            bar.update(done - bar.n)
            if cancel is not None and cancel.is_set():
                raise RolloutCancelled(label)

        mine = play(parts.pool, turn_act, [seeds[i] for i in share], max_turns=max_turns,
                    progress=progress, split=split, to_env=parts.pipeline.prompter.env_action,
                    slots=slots, turn_limit=parts.config.env.turn_limit) if len(share) else []
    return concat_gathered(mine)


def dialogue_text(episode: Episode) -> str:
    """One played dialogue as text: the final observation (the whole dialogue, as the policy read
    it), and how it ended."""
    last = episode.next_observations[-1] if episode.next_observations else ""
    ended = "won" if episode.success else "cut short" if episode.truncated else "lost"
    return f"{last.rstrip()}\n-- {ended}: return {episode.total_return:g} in {len(episode.actions)} turns"


def play_games(parts: Parts, act: AgentAct, states: States, seeds: Sequence[int], key, *, greedy: bool, label: str,
               split: str = "eval") -> list[Episode]:
    """The games of ``seeds`` on ``split``'s tasks, dialogue ``g`` sampled with keys folded from
    ``key`` (greedy: the agent's greedy rule), as the run's evaluations play them."""
    return _play(parts, act, states, list(seeds), key, greedy, label, split=split)


def collect(parts: Parts, act: AgentAct, states: States, iteration: int, staleness: int = 0,
            cancel: threading.Event | None = None) -> list[Episode]:
    """``rollout_size`` dialogues with the agent's acting rule (sampling; CHAI: its choice), on the
    env's training tasks (``split="train"``: e.g. WebShop's training goals); with
    ``rollout_group_size`` k > 1, ``rollout_size / k`` games each played k times in a row (the same
    seed: the same secret word or city), each sampled with its own key. The games and keys are
    the iteration's, whenever and with whichever ``states`` it is played; ``staleness`` (how many
    updates ``states`` lags behind the serial schedule's) is recorded in each episode. A set
    ``cancel`` stops the rollout at its next turn (:class:`RolloutCancelled`)."""
    c = parts.config
    k = c.rollout_group_size  # rollouts per game (GRPO's groups): rollout_size / k games, each k times
    seeds = np.repeat(np.random.SeedSequence([c.seed, iteration]).generate_state(c.rollout_size // k), k)
    episodes = _play(parts, act, states, seeds, parts.key_for(ROLLOUT, iteration), False, f"rollouts {iteration}",
                     cancel=cancel)
    for episode in episodes:
        episode.staleness = staleness
    return episodes


class RolloutCancelled(Exception):
    """A rollout stopped by its ``cancel`` event (the run is stopping at once)."""


def snapshot(states: States) -> States:
    """Copies of the arrays an acting rule reads (parameters and targets; neither the optimizer
    state nor the frozen base weights, which no step replaces), for a rollout that runs while the
    learner's steps donate the originals."""
    def copy(state):
        if state is None:
            return None
        copied = lambda tree: None if tree is None else jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731
        return state._replace(params=copied(state.params), target=copied(state.target), opt_state=None)

    return States(copy(states.actor), copy(states.critic))


class AheadRollout:
    """The rollout of ``iteration`` played in a background thread with a :func:`snapshot` of
    ``states``, while the caller's learner steps run (``config.rollout.staleness`` 1; one process:
    the programs of two threads would interleave differently on several hosts)."""

    def __init__(self, parts: Parts, act: AgentAct, states: States, iteration: int):
        self.iteration, self.cancel = iteration, threading.Event()
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollout-ahead")
        self._future = self._thread.submit(collect, parts, act, snapshot(states), iteration, 1, self.cancel)
        self._thread.shutdown(wait=False)

    def result(self) -> list[Episode]:
        """Waits for the rollout; its episodes."""
        return self._future.result()

    def abandon(self) -> None:
        """Stops the rollout at its next turn and waits for that."""
        self.cancel.set()
        try:
            self._future.result()
        except RolloutCancelled:
            pass


def evaluate(parts: Parts, act: AgentAct, states: States, sampled: bool = False) -> list[Episode]:
    """``eval_size`` greedy dialogues (CHAI: its choice among samples), on the same games in every
    evaluation and for every run seed, from the env's evaluation tasks (``split="eval"``: e.g.
    WebShop's evaluation goals; envs without splits play seeds ``EVAL_SEED + i``). ``sampled``: the
    same games with the rollouts' sampling and a key that is the same in every evaluation."""
    seeds = [EVAL_SEED + i for i in range(parts.config.eval_size)]
    if sampled:
        return _play(parts, act, states, seeds, parts.key_for(EVAL, 1), False, "eval_sampled", split="eval")
    return _play(parts, act, states, seeds, parts.key_for(EVAL), True, "eval", split="eval")


def store(parts: Parts, replay: ReplayBuffer, episodes: Sequence[Episode], first_episode: int) -> int:
    """Adds the episodes' transitions (texts and token rows) to ``replay``; returns how many."""
    rows = parts.pipeline.transitions(episodes, first_episode)
    for column in ("staleness", "at_limit"):
        if rows and replay.kinds and column not in replay.kinds:  # a buffer saved before the column existed
            replay.add_column(column, 0)
    if rows:
        replay.add(**rows)
    return len(rows.get("observation", ()))
