"""A batch of environments stepped in parallel by worker processes that may crash.

    pool = EnvPool(functools.partial(TwentyQuestions), num_envs=128, num_workers=4)
    observations = pool.reset(seeds=range(128))
    results = pool.step(actions)            # None for an env that is not playing
    pool.close()

* Workers start with ``spawn`` (forking a process that has started JAX can deadlock); each owns
  the envs ``i`` with ``i % num_workers == worker`` (one jericho game per env, each in a worker).
* A worker that dies (segfault, ``kill -9``) or does not answer within ``timeout_s`` is
  restarted with fresh envs, and one warning line is logged (the worker's index and why). The
  episodes it was running end there: their step result is ``done=True`` with
  ``info.truncated=True`` and ``info.extra["worker_restarted"]=True`` (the learners bootstrap
  from a truncation), the observation is the last one seen, and the env must be reset before its
  next episode. ``pool.restarts`` counts restarts (:func:`archer_jax.rollout.play` reports them
  per batch, as ``rollout/worker_restarts`` in the metrics).
* Every reset and step goes through :func:`archer_jax.envs.base.reset_env` /
  :func:`~archer_jax.envs.base.step_env` (clean texts; ``split`` for envs that take it), and a
  step of an env that is not playing (never reset, or its episode ended) raises
  :class:`~archer_jax.envs.base.EnvError` before anything is stepped: the contract of
  :mod:`archer_jax.envs.base` holds for every env, your own included.
* ``num_workers=0`` runs the envs in this process with the same interface. There, envs whose
  class has a static ``step_many(envs, actions)`` are stepped together through it (question
  games answer all their questions in one batched model decode: :mod:`archer_jax.model_oracle`).

The env factory must be picklable (a module-level class or ``functools.partial`` of one).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing as mp
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from archer_jax.envs.base import (
    SPLITS,
    Env,
    EnvError,
    StepInfo,
    StepResult,
    clean_result,
    episode_over,
    not_started,
    reset_env,
    step_env,
)

log = logging.getLogger(__name__)

EnvFactory = Callable[[], Env]


def _apply(env: Env, command: str, argument: Any) -> str | StepResult:
    """One reset (``argument`` = ``(seed, split)``) or step (the action), through the boundary."""
    return reset_env(env, *argument) if command == "reset" else step_env(env, argument)


def _steps_together(kind: type) -> bool:
    """Whether envs of class ``kind`` step through its ``step_many``: only when ``kind`` does not
    override ``step`` below the class that defines ``step_many`` (a subclass that changes
    ``step``, e.g. to wrap its results, is stepped one by one so its override runs)."""
    owner = next((k for k in kind.__mro__ if "step_many" in vars(k)), None)
    return owner is not None and callable(kind.step_many) and kind.step is owner.step


def _step_local(envs: Sequence[Env], actions: dict[int, str]) -> dict[int, StepResult]:
    """Steps in-process envs: through their class's ``step_many`` where it has one (all of a
    class at once), else one by one."""
    replies: dict[int, StepResult] = {}
    together: dict[type, list[int]] = {}
    for i in actions:
        if _steps_together(type(envs[i])):
            together.setdefault(type(envs[i]), []).append(i)
        else:
            replies[i] = step_env(envs[i], actions[i])
    for kind, members in together.items():
        results = kind.step_many([envs[i] for i in members], [actions[i] for i in members])
        replies.update((i, clean_result(r, kind.__name__)) for i, r in zip(members, results))
    return replies


def _env_name(make_env: EnvFactory) -> str:
    """The name of the envs ``make_env`` makes (a class, or a ``functools.partial`` of one)."""
    while isinstance(make_env, functools.partial):
        make_env = make_env.func
    return getattr(make_env, "__name__", type(make_env).__name__)


def _worker(conn, make_env: EnvFactory, indices: Sequence[int]) -> None:
    """Worker loop: ``(command, {index: argument})`` in, ``{index: reply}`` out."""
    envs = {i: make_env() for i in indices}
    while True:
        try:
            command, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if command == "close":
            return
        replies: dict[int, Any] = {}
        for i, argument in payload.items():
            try:
                replies[i] = _apply(envs[i], command, argument)
            except Exception as e:  # the env's own bug: report it instead of dying
                replies[i] = EnvError(f"env {i} failed in {command}: {type(e).__name__}: {e}")
        conn.send(replies)


class _Process:
    def __init__(self, ctx, make_env: EnvFactory, indices: Sequence[int]):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, make_env, list(indices)), daemon=True)
        self.process.start()
        child.close()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class EnvPool:
    """``num_envs`` environments from ``make_env`` over ``num_workers`` processes (0 = in-process)."""

    def __init__(
        self,
        make_env: EnvFactory,
        num_envs: int,
        *,
        num_workers: int = 0,
        timeout_s: float = 120.0,
        start_method: str = "spawn",
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.make_env = make_env
        self.num_envs = num_envs
        self.num_workers = min(num_workers, num_envs)
        self.timeout_s = timeout_s
        self.restarts = 0
        self.env_name = _env_name(make_env)
        self._last_obs = [""] * num_envs
        self._started = [False] * num_envs  # reset at least once
        self._playing = [False] * num_envs  # reset, and its episode not over
        self._ctx = mp.get_context(start_method)
        self._local = [make_env() for _ in range(num_envs)] if self.num_workers == 0 else None
        self._workers = [self._start(w) for w in range(self.num_workers)]

    def _indices(self, worker: int) -> list[int]:
        return list(range(worker, self.num_envs, self.num_workers))

    def _start(self, worker: int) -> _Process:
        return _Process(self._ctx, self.make_env, self._indices(worker))

    def _call(self, command: str, arguments: dict[int, Any]) -> dict[int, Any]:
        """Sends each worker its share, gathers replies; restarts the workers that fail."""
        if self._local is not None:
            if command == "step":
                return _step_local(self._local, arguments)
            return {i: _apply(self._local[i], command, a) for i, a in arguments.items()}
        shares: dict[int, dict[int, Any]] = {}
        for i, argument in arguments.items():
            shares.setdefault(i % self.num_workers, {})[i] = argument
        sent = []
        replies: dict[int, Any] = {}
        for w, share in shares.items():
            try:
                self._workers[w].conn.send((command, share))
                sent.append(w)
            except (BrokenPipeError, OSError):
                replies.update(self._restart(w, share, f"died before its {command}"))
        for w in sent:
            worker = self._workers[w]
            try:
                if not worker.conn.poll(self.timeout_s):
                    raise TimeoutError
                replies.update(worker.conn.recv())
            except TimeoutError:
                replies.update(self._restart(w, shares[w], f"did not answer its {command} within {self.timeout_s:g} s"))
            except (EOFError, OSError):
                replies.update(self._restart(w, shares[w], f"died during its {command}"))
        for i, reply in replies.items():
            if isinstance(reply, EnvError):
                raise reply
        return replies

    def _restart(self, worker: int, share: dict[int, Any], cause: str) -> dict[int, StepResult | str]:
        """Replaces a dead worker (one warning line: which and why); its envs' episodes end as truncated."""
        old = self._workers[worker]
        old.stop()
        code = old.process.exitcode
        exit_text = f", exit code {code}" if code is not None else ""
        self._workers[worker] = self._start(worker)
        self.restarts += 1
        log.warning("env worker %d (%d %s envs) %s%s: restarted (restart %d of this pool); its episodes end as truncated",
                    worker, len(self._indices(worker)), self.env_name, cause, exit_text, self.restarts)
        info = StepInfo(truncated=True, extra={"worker_restarted": True})
        return {i: StepResult(self._last_obs[i], 0.0, True, info) for i in share}

    def reset(
        self, seeds: Iterable[int | None] | None = None, *, indices: Sequence[int] | None = None, split: str = "train"
    ) -> list[str]:
        """Starts an episode in every env (or only in ``indices``, one seed each) on ``split``'s
        tasks (for envs that have splits: :mod:`archer_jax.envs.base`); returns the first
        observations of the envs reset, in order."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        indices = list(range(self.num_envs)) if indices is None else list(indices)
        seeds = list(seeds) if seeds is not None else [None] * len(indices)
        if len(seeds) != len(indices):
            raise ValueError(f"got {len(seeds)} seeds for {len(indices)} envs")
        if any(not 0 <= i < self.num_envs for i in indices):
            raise ValueError(f"env indices must be in [0, {self.num_envs}), got {indices}")
        for i in indices:
            self._playing[i] = False  # until its reset succeeds
        replies = self._call("reset", {i: (seed, split) for i, seed in zip(indices, seeds)})
        for i, seed in zip(indices, seeds):
            reply = replies[i]
            if isinstance(reply, StepResult):  # the worker died during reset: try once more
                reply = self._call("reset", {i: (seed, split)})[i]
                if isinstance(reply, StepResult):
                    raise EnvError(f"env {i}: its worker died twice while resetting")
            self._last_obs[i] = reply
            self._started[i] = self._playing[i] = True
        return [self._last_obs[i] for i in indices]

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        """Steps the envs whose action is not None (the others return None). Stepping an env
        that is not playing (never reset, or its episode ended) is an :class:`EnvError`."""
        if len(actions) != self.num_envs:
            raise ValueError(f"got {len(actions)} actions for {self.num_envs} envs")
        for i, action in enumerate(actions):
            if action is not None and not self._playing[i]:
                who = f"env {i} ({self.env_name})"
                raise episode_over(who) if self._started[i] else not_started(who)
        replies = self._call("step", {i: a for i, a in enumerate(actions) if a is not None})
        results: list[StepResult | None] = [None] * self.num_envs
        for i, result in replies.items():
            results[i] = result
            self._last_obs[i] = result.observation
            self._playing[i] = not result.done
        return results

    def local_env(self, index: int) -> Env:
        """Env ``index`` of an in-process pool (``num_workers=0``), e.g. to read its walkthrough."""
        if self._local is None:
            raise ValueError("the envs of a pool with workers live in other processes")
        return self._local[index]

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            worker.process.join(timeout=2)
            worker.stop()
        self._workers = []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
