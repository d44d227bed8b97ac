"""WebShop HTTP client against a stand-in of the WebShop Flask server (tests/envs/fake_webshop.py,
localhost only): pages, actions, rewards, limits, one-line errors."""

from __future__ import annotations

import socket

import pytest

from archer_jax.envs.base import Env, EnvError
from archer_jax.envs.webshop import WebShop, parse_action, parse_page, selected_options
from tests.envs.fake_webshop import INSTRUCTIONS, TARGET, Shop, render, serve

GOALS = (0, len(INSTRUCTIONS))  # the stand-in's 5 goals, for both splits


@pytest.fixture(scope="module")
def server():
    with serve(Shop) as url:
        yield url


def _webshop(url: str, **kw) -> WebShop:
    return WebShop(base_url=url, train_goals=GOALS, eval_goals=GOALS, **kw)


@pytest.fixture
def env(server):
    Shop.requests.clear()
    return _webshop(server, timeout_s=5.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------------------------


def test_is_an_env(env):
    assert isinstance(env, Env)


def test_reset_shows_instruction_search_box_and_actions(env):
    obs = env.reset(seed=3)
    assert env.session_id == "fixed_3"
    assert Shop.requests[-1] == ("GET", "/fixed_3")
    assert obs.startswith(f"Instruction: {INSTRUCTIONS[3]}\n")
    assert obs.count(INSTRUCTIONS[3]) == 1  # the page's own instruction line is not repeated
    assert "WebShop" in obs and "[button] Search [button_]" in obs
    assert obs.endswith("Available actions:\nsearch[<query>]")
    assert "docs.google.com" not in obs and "bootsnipp" not in obs  # attributes and comments are not text
    assert env.available_actions() == ["search[<query>]"]


def test_reset_without_seed_draws_a_goal_of_the_split(server):
    env = WebShop(base_url=server, train_goals=(1, 3), eval_goals=(3, 5))

    def draw(split: str) -> int:
        env.reset(split=split)
        assert env.session_id == f"fixed_{env.goal}"
        return env.goal

    assert {draw("train") for _ in range(40)} == {1, 2}  # only the training goals, both (p(miss) = 2**-39)
    assert {draw("eval") for _ in range(40)} == {3, 4}
    obs = env.reset(goal=0)
    assert env.session_id == "fixed_0" and obs.startswith(f"Instruction: {INSTRUCTIONS[0]}\n")


def test_full_episode_buys_the_target_with_its_options(env):
    env.reset(seed=0)
    r = env.step("search[Blue Crew Neck T-Shirt]\n")
    assert (r.reward, r.done, r.info.invalid, r.info.truncated) == (0.0, False, False, False)
    assert r.info.extra["page"] == "search_results"
    assert ("POST", "/fixed_0") in Shop.requests  # the search form is posted, then redirected
    assert Shop.requests[-1] == ("GET", "/search_results/fixed_0/%5B'blue',%20'crew',%20'neck',%20't-shirt'%5D/1")
    obs = r.observation
    assert obs.startswith(f"Instruction: {INSTRUCTIONS[0]}\n")
    assert "Current Query: blue crew neck t-shirt" in obs
    for asin in (TARGET, "B0OTHER002", "B0OTHER003", "B0BROKEN04"):
        assert f"[button] {asin} [button_]" in obs and f"click[{asin}]" in obs
    assert "B0COMMENT9" not in obs  # product links inside the HTML comment are not on the page
    assert "Men's Classic Crew Neck T-Shirt, Short Sleeve Cotton Tee" in obs
    assert "Women's High Waist Yoga Pants & Leggings" in obs and "$9.99 to $12.99" in obs
    assert "[button] Back to Search [button_]" in obs and "search[<query>]" not in obs

    r = env.step(f"click[{TARGET.lower()}]")  # names match case-insensitively
    assert not r.info.invalid and r.info.extra["page"] == "item_page"
    keywords = "%5B'blue',%20'crew',%20'neck',%20't-shirt'%5D"
    assert Shop.requests[-1] == ("GET", f"/item_page/fixed_0/{TARGET}/{keywords}/1/%7B%7D")
    obs = r.observation
    assert "Price: $19.99" in obs and "Rating: N.A." in obs
    options = ["color", "blue", "red", "size", "s", "m"]
    assert "\n".join(o if o in ("color", "size") else f"[button] {o} [button_]" for o in options) in obs
    names = ["Back to Search", "< Back to Results", "blue", "red", "s", "m"]
    for name in names + ["Description", "Features", "Reviews", "Attributes", "Buy Now"]:
        assert f"click[{name}]" in obs
    assert "JSON.parse" not in obs and "console.log" not in obs  # script text is not visible

    r = env.step("click[blue]")
    assert not r.info.invalid
    assert "[clicked button] blue [clicked button_]" in r.observation and "[button] red [button_]" in r.observation
    r = env.step("click[ M ]")
    assert "[clicked button] blue [clicked button_]" in r.observation
    assert "[clicked button] m [clicked button_]" in r.observation and "[button] s [button_]" in r.observation
    assert Shop.requests[-1][1].endswith("/%7B'color':%20'blue',%20'size':%20'm'%7D")

    r = env.step("click[Buy Now]")
    assert Shop.requests[-1] == ("POST", f"/done/fixed_0/{TARGET}/%7B'color':%20'blue',%20'size':%20'm'%7D")
    assert r.done and r.terminal and r.reward == 1.0
    assert r.info.success and not r.info.truncated and not r.info.invalid
    assert r.info.extra["reward"] == 1.0 and r.info.extra["page"] == "done"
    assert "Thank you for shopping with us!" in r.observation
    assert "Your score (min 0.0, max 1.0)\n1.0" in r.observation
    assert "SECRET" not in r.observation and "goal_options" not in r.observation  # hidden parts stay hidden
    assert r.observation.endswith("Available actions: none")

    n = len(Shop.requests)
    with pytest.raises(EnvError, match=r"^WebShop: step\(\) after the episode ended .*call reset\(\) first$"):
        env.step("click[Buy Now]")  # the end is reported once
    assert len(Shop.requests) == n  # nothing was sent


def test_partial_match_gives_the_fractional_reward(env):
    env.reset(seed=1)
    env.step("search[t-shirt]")
    env.step(f"click[{TARGET}]")
    env.step("click[red]")
    r = env.step("click[buy now]")
    assert r.done and r.reward == pytest.approx(2 / 3) and not r.info.success
    assert r.info.extra["reward"] == pytest.approx(2 / 3)


def test_navigation_sub_page_and_back(env):
    env.reset(seed=0)
    env.step("search[socks]")
    r = env.step("click[B0OTHER003]")
    r = env.step("click[Description]")
    assert r.info.extra["page"] == "item_sub_page" and "Description of B0OTHER003: soft 100% cotton." in r.observation
    assert "click[< Back to Item Page]" in r.observation
    r = env.step("click[< Back to Item Page]")
    assert r.info.extra["page"] == "item_page" and "click[Buy Now]" in r.observation
    r = env.step("click[< Back to Results]")
    assert r.info.extra["page"] == "search_results"
    assert "[clicked button] B0OTHER003 [clicked button_]" in r.observation  # visited products are marked
    r = env.step("click[Back to Search]")
    assert r.info.extra["page"] == "start" and r.observation.endswith("search[<query>]")
    r = env.step("click[B0OTHER002]")  # not on this page any more
    assert r.info.invalid
    r = env.step("search[yoga / pants]")  # '/' would split the URL path
    assert not r.info.invalid and "B0OTHER002" in r.observation
    assert Shop.requests[-1][1] == "/search_results/fixed_0/%5B'yoga',%20'pants'%5D/1"


@pytest.mark.parametrize(
    "action",
    [
        "",
        "   \n",
        "click[]",
        "search[]",
        "search[   ]",
        "click[Checkout]",
        "click[Buy Now]",  # not on the search page
        "buy now",
        "Search for shirts",
        "search[shirt",
        "search[" + "x" * 10_000 + "]",
        "x" * 10_240,
        "🛒🛍️",
        "click[🛒]",
        "search[blue\x00shirt]",
        "click[Search\x07]",
        "\x1b[31mclick[Search]\x1b[0m",
        "click[search]",  # the search button is not a click target
        "search[shirt]\nclick[B0TARGET01]",
        "search[\ud800]",  # a lone surrogate (cannot be encoded)
    ],
)
def test_invalid_actions_keep_the_page(env, action):
    obs = env.reset(seed=0)
    n = len(Shop.requests)
    r = env.step(action)
    assert r.info.invalid and not r.done and r.reward == 0.0 and not r.info.success
    assert r.observation == obs
    assert r.info.extra["reason"]
    assert len(Shop.requests) == n  # nothing was sent


def test_search_is_invalid_off_the_search_page_and_non_text_actions(env):
    env.reset(seed=0)
    obs = env.step("search[shirt]").observation
    r = env.step("search[socks]")
    assert r.info.invalid and r.observation == obs
    for bad in (None, 42, b"click[B0TARGET01]"):
        r = env.step(bad)  # type: ignore[arg-type]
        assert r.info.invalid and r.observation == obs


def test_server_error_on_a_click_is_an_invalid_action(env):
    env.reset(seed=0)
    obs = env.step("search[anything]").observation
    r = env.step("click[B0BROKEN04]")  # the server answers 500
    assert r.info.invalid and not r.done and r.observation == obs
    assert r.info.extra["http_status"] == 500
    assert not env.step(f"click[{TARGET}]").info.invalid  # the episode goes on


def test_ten_steps_end_the_episode(env):
    env.reset(seed=2)
    actions = ["search[shirt]", f"click[{TARGET}]", "click[blue]", "click[nonsense]", "click[< Back to Results]"]
    actions += ["click[Back to Search]", "", "search[socks]", "click[B0OTHER003]", "click[red]"]
    for i, action in enumerate(actions, start=1):
        r = env.step(action)
        assert r.reward == 0.0 and not r.info.success
        if i < 10:
            assert not r.done and not r.info.at_limit, i
    assert r.done and r.info.at_limit and r.terminal and not r.info.truncated and not r.info.invalid
    assert r.info.extra["step"] == 10
    with pytest.raises(EnvError, match="after the episode ended"):
        env.step("click[Buy Now]")  # over: Buy Now no longer counts


def test_buying_on_the_last_step_is_terminal(env):
    env.reset(seed=0)
    for _ in range(6):
        env.step("click[nothing]")
    env.step("search[shirt]")
    env.step(f"click[{TARGET}]")
    env.step("click[blue]")
    r = env.step("click[Buy Now]")  # step 10
    assert r.done and r.terminal and not r.info.truncated and r.reward == pytest.approx(2 / 3)


def test_reset_starts_over(env):
    env.reset(seed=0)
    for _ in range(10):
        env.step("x")
    obs = env.reset(seed=4)
    assert INSTRUCTIONS[4] in obs
    r = env.step("search[shirt]")
    assert not r.done and not r.info.invalid and r.info.extra["step"] == 1


def test_custom_max_steps(server):
    env = _webshop(server, max_steps=2)
    env.reset(seed=0)
    assert not env.step("x").done
    assert env.step("x").info.at_limit


def test_unreachable_server_is_a_one_line_env_error():
    port = _free_port()  # bound, then closed: nothing listens there
    url = f"http://127.0.0.1:{port}"
    env = _webshop(url, timeout_s=2.0)
    with pytest.raises(EnvError) as e:
        env.reset(seed=0)
    msg = str(e.value)
    assert "\n" not in msg and f"{url}/fixed_4" in msg and "start the WebShop server" in msg  # the goal check's request


def test_a_silent_server_times_out_with_a_one_line_env_error():
    with socket.socket() as s:  # accepts connections (backlog) and never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(EnvError) as e:
            _webshop(url, timeout_s=0.3).reset(seed=0)
    msg = str(e.value)
    assert "\n" not in msg and url in msg and "did not answer within 0.3 s" in msg and "start the WebShop server" in msg


def test_a_goal_the_server_lacks_is_an_env_error(env):
    with pytest.raises(EnvError, match=r"HTTP 500 .*\(is goal index 5 in range\?\)") as e:
        env.reset(goal=len(INSTRUCTIONS))  # the real app: goals[idx] -> IndexError -> 500
    assert "\n" not in str(e.value)
    for bad in (dict(seed=-1), dict(goal=-1), dict(seed=0, split="test")):
        with pytest.raises(ValueError):
            env.reset(**bad)


def test_step_before_reset(server):
    with pytest.raises(EnvError, match=r"^WebShop: step\(\) before reset\(\); call reset\(\) first$"):
        WebShop(base_url=server).step("search[x]")


def test_constructor_checks():
    with pytest.raises(ValueError):
        WebShop(base_url="127.0.0.1:3000")
    with pytest.raises(ValueError):
        WebShop(max_steps=0)
    with pytest.raises(ValueError):
        WebShop(timeout_s=0)


# -- pure helpers ------------------------------------------------------------------------------


def test_parse_action():
    assert parse_action("search[ red  shoes ]") == ("search", "red shoes")
    assert parse_action("Click[Buy Now]\n") == ("click", "Buy Now")
    assert parse_action("click[< Prev]") == ("click", "< Prev")
    assert isinstance(parse_action("think[hmm]"), str)


def test_selected_options_from_urls():
    url = "http://h/item_page/s/A/%5B'a'%5D/1/%7B'color':%20'blue',%20'size':%20'm'%7D"
    assert selected_options(url) == {"color": "blue", "size": "m"}
    assert selected_options('http://h/done/s/A/{"color": "red"}') == {"color": "red"}
    assert selected_options("http://h/item_page/s/A/k/1/%7B%7D") == {}
    assert selected_options("http://h/item_page/s/A/k/1/%7Bnot%20a%20literal") == {}
    assert selected_options("http://h/fixed_0") == {}


def test_parse_page_score_and_hidden_text():
    page = parse_page(
        render(
            "done_page.html", mturk_code="C", asin=TARGET, options_json="{}", instruction_text="find x", reward=0.5
        ).decode(),
        "http://h/done/fixed_0/B0TARGET01/%7B%7D",
    )
    assert page.kind == "done" and page.reward == 0.5 and page.clickables == {} and page.search_url is None
    text = " ".join(s.text for s in page.segments)
    assert "find x" not in text and "SECRET" not in text
