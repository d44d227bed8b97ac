"""Environments by name, for configs: ``config.env.name = "guess_my_city"``.

Each entry turns a config into a picklable zero-argument factory (what
:class:`archer_jax.envs.pool.EnvPool` starts in its workers) and, where the env has one, a
scripted expert for the SFT warm start. Your own env plugs in two ways:

    registry.register("my_game", lambda env: functools.partial(MyGame, **env.options))
    --config.env.name=my_package.my_module:MyGame      # called with config.env.options as keywords
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archer_jax.envs import experts
from archer_jax.envs.detective import Detective
from archer_jax.envs.guess_my_city import GuessMyCity
from archer_jax.envs.oracle import Oracle
from archer_jax.envs.oracle_formats import EMBEDDED, parse
from archer_jax.envs.pool import EnvFactory
from archer_jax.envs.twenty_questions import SUBSET, TwentyQuestions, TwentyQuestionsSubset
from archer_jax.envs.webshop import DEFAULT_URL, WebShop
from archer_jax.envs.webshop_goals import EVAL_GOALS, TRAIN_GOALS, GoalRanges, goal_range
from archer_jax.errors import ConfigError
from archer_jax.runtime.hub_names import is_cached, is_offline, looks_like_path

log = logging.getLogger(__name__)

OracleFactory = Callable[[], Oracle]  # a model oracle's, picklable (archer_jax.model_oracle.factory)

DETECTIVE_HINT = (
    "set config.env.options.game_path to detective.z5 (from the jericho game suite, "
    "https://github.com/BYU-PCCL/z-machine-games, jericho-game-suite/detective.z5)"
)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """How to build one named env from a config.

    ``factory(env)`` (``env``: the run's ``config.env`` group: its name, ``max_turns`` and
    ``options``) returns a picklable zero-argument env factory (a question game's also
    takes ``oracle=``, its model oracle's factory: :func:`env_factory`). ``expert(kind, seed)``, when
    set, returns a scripted player with ``act(observation) -> action`` for SFT data.
    ``options`` are the ``config.env.options`` keys the env accepts (with their defaults);
    ``check(config)`` (the whole run config, at validation) raises ConfigError for bad ones.
    """

    factory: Callable[[Any], EnvFactory]
    expert: Callable[[str, int], Any] | None = None
    options: dict = dataclasses.field(default_factory=dict)
    check: Callable[[Any], None] | None = None


def _oracle(env, oracle: OracleFactory | None = None) -> str | OracleFactory:
    """What a question game gets as ``oracle``: the model oracle's factory handed in, else the
    option (its spec: the game refuses a model's, which only a factory from above can load)."""
    return env.options.get("oracle", EMBEDDED) if oracle is None else oracle


def _twenty_questions(env, oracle: OracleFactory | None = None) -> EnvFactory:
    return functools.partial(TwentyQuestions, max_turns=env.max_turns, oracle=_oracle(env, oracle))


def _twenty_questions_subset(env, oracle: OracleFactory | None = None) -> EnvFactory:
    return functools.partial(TwentyQuestionsSubset, max_turns=env.max_turns, oracle=_oracle(env, oracle))


def _guess_my_city(env, oracle: OracleFactory | None = None) -> EnvFactory:
    return functools.partial(GuessMyCity, max_turns=env.max_turns, oracle=_oracle(env, oracle))


def _check_oracle(config) -> None:
    """``env.options.oracle`` is 'embedded', 't5:PATH' or 'lm:PATH' with a format for this env, a
    path that exists (or a hub name), and a model oracle runs with the envs in this process."""
    spec = _oracle(config.env)
    try:
        kind, path = parse(spec, config.env.name)
    except ValueError as e:
        raise ConfigError(f"config.env.options.oracle: {e}") from None
    if kind == EMBEDDED:
        return
    if not Path(path).expanduser().exists():
        if looks_like_path(path):
            raise ConfigError(f"config.env.options.oracle: {path} does not exist")
        if is_offline() and not is_cached(path):  # "oracles/20q_t5" reads as a hub name too
            raise ConfigError(f"config.env.options.oracle: {path} does not exist, nor is it a hub model in the local "
                              "Hugging Face cache (HF_HUB_OFFLINE is set)")
    if config.env.workers:
        raise ConfigError(f"config.env.workers: a model oracle ({spec}) answers every env's question in one batch "
                          f"in this process; set env.workers=0 (got {config.env.workers})")


def _detective(env) -> EnvFactory:
    options = env.options
    return functools.partial(
        Detective,
        Path(options["game_path"]).expanduser(),
        max_steps=env.max_turns,
        list_valid_actions=options.get("list_valid_actions", True),
    )


def _check_detective(config) -> None:
    path = config.env.options.get("game_path", "")
    if not path:
        raise ConfigError(f"config.env.options.game_path: missing; {DETECTIVE_HINT}")
    if not Path(path).expanduser().is_file():
        raise ConfigError(f"config.env.options.game_path: {path} does not exist; {DETECTIVE_HINT}")


def _webshop(env) -> EnvFactory:
    options = env.options
    return functools.partial(
        WebShop,
        options.get("base_url", DEFAULT_URL),
        max_steps=env.max_turns,
        timeout_s=options.get("timeout_s", 10.0),
        train_goals=tuple(options.get("train_goals", TRAIN_GOALS)),
        eval_goals=tuple(options.get("eval_goals", EVAL_GOALS)),
    )


def _check_webshop(config) -> None:
    """The goal ranges are pairs 0 <= start < end, and the evaluation range holds eval_size goals
    (see archer_jax.envs.webshop_goals); overlapping ranges are allowed, with a warning."""
    options = config.env.options
    ranges = {}
    for name, default in (("train_goals", TRAIN_GOALS), ("eval_goals", EVAL_GOALS)):
        try:
            ranges[name] = goal_range(name, options.get(name, default))
        except ValueError as e:
            raise ConfigError(f"config.env.options.{e}") from None
    goals = GoalRanges(ranges["train_goals"], ranges["eval_goals"])
    held = goals.eval[1] - goals.eval[0]
    if config.eval_size > held:
        raise ConfigError(
            f"config.eval_size: {config.eval_size} evaluation games, but config.env.options.eval_goals={goals.eval} "
            f"holds {held} goals (each evaluation plays distinct goals)"
        )
    if goals.overlap:
        log.warning("config.env.options: train_goals=%s and eval_goals=%s overlap: evaluations are not on held-out goals",
                    goals.train, goals.eval)


def _twenty_questions_expert(kind: str, seed: int):
    return experts.expert(kind, seed)


def _subset_expert(kind: str, seed: int):
    return experts.expert(kind, seed, universe=SUBSET)


def _city_expert(kind: str, seed: int):
    return experts.city_expert(kind, seed)


ENVS: dict[str, EnvSpec] = {
    "twenty_questions": EnvSpec(_twenty_questions, _twenty_questions_expert, dict(oracle="embedded"), _check_oracle),
    "twenty_questions_subset": EnvSpec(_twenty_questions_subset, _subset_expert, dict(oracle="embedded"), _check_oracle),
    "guess_my_city": EnvSpec(_guess_my_city, _city_expert, dict(oracle="embedded"), _check_oracle),
    "detective": EnvSpec(_detective, options=dict(game_path="", list_valid_actions=True), check=_check_detective),
    "webshop": EnvSpec(
        _webshop,
        options=dict(base_url="", timeout_s=10.0, train_goals=TRAIN_GOALS, eval_goals=EVAL_GOALS),
        check=_check_webshop,
    ),
}


def register(name: str, factory: Callable[[Any], EnvFactory], *, expert=None, options: dict | None = None) -> None:
    """Makes ``config.env.name = name`` build envs with ``factory(config.env)``."""
    ENVS[name] = EnvSpec(factory, expert, dict(options or {}))


def _imported(name: str) -> Callable[..., Any]:
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"config.env.name: cannot import {module_name!r} for env {name!r}: {e}") from None
    if not callable(getattr(module, attr, None)):
        raise ConfigError(f"config.env.name: {module_name!r} has no callable {attr!r}")
    return getattr(module, attr)


def check(name: str) -> None:
    """Raises ConfigError unless ``name`` is a registered env or an importable ``module:callable``."""
    if name in ENVS:
        return
    if ":" in name:
        _imported(name)
        return
    raise ConfigError(f"config.env.name: unknown env {name!r}; known: {', '.join(ENVS)} (or package.module:callable)")


def check_options(name: str, config) -> None:
    """Raises ConfigError for ``config.env.options`` keys the env does not take or bad values."""
    if name not in ENVS:
        return  # an imported factory takes its options as keywords and checks them itself
    spec = ENVS[name]
    for key in config.env.options.keys():
        if key not in spec.options:
            known = ", ".join(spec.options) or "none"
            raise ConfigError(f"config.env.options.{key}: not an option of env {name!r} (options: {known})")
    if spec.check is not None:
        spec.check(config)


def env_factory(env, oracle: OracleFactory | None = None) -> EnvFactory:
    """The picklable zero-argument factory of ``env.name`` (``env``: the run's ``config.env``
    group). ``oracle``: the picklable zero-argument factory of the model oracle
    ``env.options.oracle`` names, built above the envs (:func:`archer_jax.model_oracle.from_config`),
    or None (the env's embedded oracle)."""
    if env.name in ENVS:
        spec = ENVS[env.name]
        return spec.factory(env) if oracle is None else spec.factory(env, oracle=oracle)
    return functools.partial(_imported(env.name), **dict(env.options))


def expert(config, kind: str, seed: int):
    """The scripted ``kind`` expert of ``config.env.name`` (for SFT), or a ConfigError naming the env."""
    spec = ENVS.get(config.env.name)
    if spec is None or spec.expert is None:
        raise ConfigError(
            f"config.sft.data: env {config.env.name!r} has no scripted experts; use 'walkthrough' (detective) or a .jsonl file"
        )
    return spec.expert(kind, seed)
