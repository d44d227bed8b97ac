"""WebShop: the shopping environment, one episode at a time against a running WebShop server.

The server and its URL shapes are described in :mod:`archer_jax.envs.webshop_client` (which
fetches the pages) and the HTML it renders in :mod:`archer_jax.envs.webshop_page` (which parses
them); see also the environments' notes in the README.

Goals: ``reset(seed, split="train")`` opens session ``fixed_<n>``, where goal ``n`` is the seed
mapped into the split's goal range (``train_goals``, default ``(1500, 12087)``: WebShop's training
split; ``eval_goals``, default ``(500, 1500)``: its dev split); ``reset()`` draws a goal of the
range at random, and ``reset(goal=n)`` plays goal ``n`` itself. The ranges, the mapping and how
they are checked against the server (which exposes no goal count) are in
:mod:`archer_jax.envs.webshop_goals`.

Actions: ``search[query]`` (on a page with the search box) and ``click[name]`` for a button,
a product (its ASIN) or an option value shown on the page; names match case-insensitively.
Anything else is answered with the same page, reward 0 and ``info.invalid``. "Buy Now" ends the
episode with the reward of the done page; the ``max_steps``-th step without a purchase ends it
with ``info.at_limit``, a terminal state (as the official code's time-out). A step before ``reset()`` or after the episode ended raises
:class:`~archer_jax.envs.base.EnvError` (the contract of :mod:`archer_jax.envs.base`).

Observation (the text form of WebShop's ``text_rich`` mode):

    Instruction: i need a blue shirt in size m, and price lower than 30.00 dollars
    [button] Back to Search [button_]
    ...
    color
    [clicked button] blue [clicked button_]
    [button] red [button_]
    ...

    Available actions:
    click[Back to Search]
    click[blue]
    ...
"""

from __future__ import annotations

import operator
import random
from typing import Any

from archer_jax.envs.base import EnvError, StepInfo, StepResult, episode_over, not_started
from archer_jax.envs.webshop_client import DEFAULT_URL, NavigationError, WebShopClient
from archer_jax.envs.webshop_goals import EVAL_GOALS, TRAIN_GOALS, GoalRanges, count_goals
from archer_jax.envs.webshop_page import (
    SCORE_LABEL,
    Page,
    name_key,
    norm_text,
    parse_action,
    parse_page,
    render_page,
    selected_options,
)

__all__ = ["DEFAULT_URL", "EVAL_GOALS", "TRAIN_GOALS", "WebShop", "parse_action", "parse_page", "selected_options"]

BUY_NOW = "buy now"

_SERVERS_CHECKED: set[tuple[str, int]] = set()  # (base_url, goal) the server had, in this process


class WebShop:
    """One WebShop episode at a time over HTTP (see the module docstring)."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        max_steps: int = 10,
        timeout_s: float = 10.0,
        *,
        train_goals: tuple[int, int] = TRAIN_GOALS,
        eval_goals: tuple[int, int] = EVAL_GOALS,
    ):
        self.client = WebShopClient(base_url, timeout_s)  # checks base_url and timeout_s
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = int(max_steps)
        self.goals = GoalRanges(train_goals, eval_goals)  # checks the ranges
        self._rng = random.Random()
        self.goal: int | None = None
        self.session_id: str | None = None
        self._page: Page | None = None
        self._instruction = ""
        self._visited: set[str] = set()
        self._steps = 0
        self._done = False
        self._observation = ""

    # -- protocol --------------------------------------------------------------------------------

    def reset(self, seed: int | None = None, *, split: str = "train", goal: int | None = None) -> str:
        """Opens session ``fixed_<n>``: goal ``n`` is ``goal`` when given, else ``seed`` mapped into
        ``split``'s goal range ("train" or "eval"), else a random goal of that range."""
        self.goals.of(split)  # checks split
        if goal is not None:
            goal = operator.index(goal)
            if goal < 0:
                raise ValueError(f"goal must be >= 0 (a WebShop goal index), got {goal}")
        elif seed is None:
            goal = self.goals.random_goal(split, self._rng)
        else:
            goal = self.goals.goal(seed, split)
        self._page = None  # until the new episode's page is here
        check_server(self.client, self.goals)
        session_id = f"fixed_{goal}"
        url = self.client.session_url(session_id)
        try:
            page = self.client.load(url)
        except NavigationError as e:
            hint = f" (is goal index {goal} in range?)" if e.status == 500 else ""
            raise EnvError(f"WebShop server answered {e.reason}{hint}") from None
        if page.search_url is None:
            raise EnvError(f"the page at {url} has no search box (id=search_input): is it a WebShop server?")
        self.goal, self.session_id = goal, session_id
        self._page, self._instruction = page, page.instruction
        self._visited = set()
        self._steps, self._done = 0, False
        self._observation = self._render()
        return self._observation

    def step(self, action: str) -> StepResult:
        """Plays ``search[query]`` or ``click[name]`` on the current page."""
        if self._page is None:
            raise not_started("WebShop")
        if self._done:
            raise episode_over("WebShop")
        self._steps += 1
        parsed = parse_action(action)
        if isinstance(parsed, str):
            return self._invalid(parsed)
        verb, arg = parsed
        page = self._page
        try:
            if verb == "search":
                if page.search_url is None:
                    return self._invalid("search[...] is only available on the search page")
                # The server puts the query into the URL path: a '/' would split it.
                query = norm_text(arg.replace("/", " "))
                if not query:
                    return self._invalid("empty search[]")
                new = self.client.search(page.search_url, query)
                clicked = None
            else:
                clicked = page.clickables.get(name_key(arg))
                if clicked is None:
                    return self._invalid(f"{arg!r} is not a button, product or option on this page")
                new = self.client.click(clicked)
        except NavigationError as e:
            return self._invalid(f"the server answered {e.reason}", http_status=e.status)

        if clicked is not None and clicked.kind == "product":
            self._visited.add(name_key(clicked.name))
        self._page = new
        if new.instruction:
            self._instruction = new.instruction
        bought = (clicked is not None and name_key(clicked.name) == BUY_NOW) or new.kind == "done"
        if bought:
            if new.reward is None:
                raise EnvError(f"the done page at {new.url} has no '{SCORE_LABEL}': is it a WebShop server?")
            reward = float(new.reward)
            self._done = True
            self._observation = self._render()
            success = abs(reward - 1.0) < 1e-9
            info = StepInfo(success=success, extra=self._extra(reward=reward))
            return StepResult(self._observation, reward, True, info)
        self._observation = self._render()
        return self._finish(invalid=False)

    # -- helpers ---------------------------------------------------------------------------------

    def available_actions(self) -> list[str]:
        """The actions the current page offers; none before reset() or after the episode."""
        return [] if self._page is None or self._done else self._page.available_actions()

    def _render(self) -> str:
        assert self._page is not None
        return render_page(self._page, self._instruction, self._visited)

    def _extra(self, **kw: Any) -> dict[str, Any]:
        page = self._page
        extra: dict[str, Any] = {
            "session_id": self.session_id,
            "goal": self.goal,
            "step": self._steps,
            "page": page.kind if page else None,
            "url": page.url if page else None,
        }
        extra.update(kw)
        return extra

    def _invalid(self, reason: str, **kw: Any) -> StepResult:
        return self._finish(invalid=True, reason=reason, **kw)

    def _finish(self, invalid: bool, **kw: Any) -> StepResult:
        at_limit = self._steps >= self.max_steps
        self._done = at_limit
        info = StepInfo(invalid=invalid, at_limit=at_limit, extra=self._extra(**kw))
        return StepResult(self._observation, 0.0, at_limit, info)


def has_goal(client: WebShopClient, goal: int) -> bool:
    """Whether the server has goal ``goal`` (it answers HTTP 500 past its list)."""
    try:
        client.load(client.session_url(f"fixed_{goal}"))
    except NavigationError as e:
        if e.status == 500:
            return False
        raise EnvError(f"WebShop server answered {e.reason} for goal {goal}: is it a WebShop server?") from None
    return True


def check_server(client: WebShopClient, goals: GoalRanges) -> None:
    """Once per process and server: the server has the highest goal of the ranges, or a one-line
    EnvError with its goal count (:mod:`archer_jax.envs.webshop_goals`)."""
    top = goals.highest
    key = (client.base_url, top)
    if key in _SERVERS_CHECKED:
        return
    if not has_goal(client, top):
        count = count_goals(lambda goal: has_goal(client, goal), top)
        held = f"{count} goals (indices 0..{count - 1})" if count else "no goals"
        raise EnvError(
            f"the WebShop server at {client.base_url} has {held} (it exposes no count: found by asking for "
            f"sessions fixed_<n>), but config.env.options.{goals.past(count)} goes past them; "
            f"set env.options.train_goals and eval_goals within [0, {count})"
        )
    _SERVERS_CHECKED.add(key)
