"""WebShop (DESIGN §2): an HTTP client of a running WebShop server.

The server is princeton-nlp/WebShop's Flask app (``python -m web_agent_site.app --log --attrs``,
port 3000), as the official ArCHer code used it. This client behaves like a browser: it reads
the HTML the server renders and follows what is on the page, so the URL shapes are the
server's own:

    /<session_id>                                    start page (search box); POST search_query
                                                     redirects to the results
    /search_results/<session_id>/<keywords>/<page>   results: ``a.product-link`` per product
    /item_page/<session_id>/<asin>/<keywords>/<page>/<options>
                                                     product: radio options (``data-url``),
                                                     buttons in POST forms (Buy Now, ...)
    /item_sub_page/<session_id>/<asin>/<keywords>/<page>/<sub_page>/<options>
    /done/<session_id>/<asin>/<options>              "Your score (min 0.0, max 1.0)" + reward

The session id ``fixed_<n>`` makes the server use goal ``n``; any other id draws a random goal.

Actions: ``search[query]`` (on a page with the search box) and ``click[name]`` for a button,
a product (its ASIN) or an option value shown on the page; names match case-insensitively.
Anything else is answered with the same page, reward 0 and ``info.invalid``. "Buy Now" ends the
episode with the reward of the done page; the ``max_steps``-th step without a purchase ends it
with ``info.truncated``.

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

Only the standard library is used (``urllib.request``, ``html.parser``).
"""

from __future__ import annotations

import ast
import dataclasses
import html.parser
import http.client
import json
import operator
import re
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from archer_jax.envs.base import EnvError, StepInfo, StepResult

DEFAULT_URL = "http://127.0.0.1:3000"
SCORE_LABEL = "Your score (min 0.0, max 1.0)"
BUY_NOW = "buy now"
MAX_ACTION_CHARS = 512  # longer actions are invalid (WebShop queries are a few words)
MAX_PAGE_BYTES = 16 << 20
START_HINT = (
    "start the WebShop server (princeton-nlp/WebShop: `python -m web_agent_site.app --log --attrs`) "
    "or pass its base_url"
)
PAGE_KINDS = ("search_results", "item_page", "item_sub_page", "done")

_VOID_TAGS = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_INVISIBLE_TAGS = frozenset("head script style title meta template noscript".split())
_DISPLAY_NONE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_ACTION = re.compile(r"(search|click)\[(.*)\]", re.IGNORECASE | re.DOTALL)
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SCORE = re.compile(re.escape(SCORE_LABEL) + r"\s*:?\s*(" + _NUMBER + ")")
_URL_SAFE = "%/:=&?~#+!$,;'@()*[]"  # keep what is already escaped or reserved


def _norm(text: str) -> str:
    """Whitespace collapsed: the form in which page text is shown."""
    return " ".join(text.split())


def _key(text: str) -> str:
    """How clickable names are matched: whitespace collapsed, case folded."""
    return _norm(text).casefold()


def _one_line(text: Any) -> str:
    return _norm(str(text)) or type(text).__name__


# ----------------------------------------------------------------------------------------------
# HTML -> page


@dataclasses.dataclass(frozen=True)
class Clickable:
    name: str  # as shown on the page
    kind: str  # "button" | "product" | "option"
    url: str  # absolute
    method: str = "get"  # "get" | "post"
    option_name: str = ""  # the option group ("color", "size") for kind == "option"


@dataclasses.dataclass
class _Segment:
    kind: str  # "text" | "button" | "product" | "option"
    texts: list[str] = dataclasses.field(default_factory=list)
    form: dict[str, Any] | None = None  # button: its form
    href: str = ""  # product: its link
    label_for: str = ""  # option: the radio's id

    @property
    def text(self) -> str:
        return _norm(" ".join(self.texts))


class _PageParser(html.parser.HTMLParser):
    """Collects visible text in order, the clickables, the instruction and the score.

    Visibility follows WebShop's ``tag_visible`` (no head/script/style/title/meta text, no
    comments) and also skips ``hidden`` / ``display:none`` elements (the done page keeps the goal
    there). Unbalanced end tags (the templates have ``<h4>...</h5>``) are forgiven: an end tag
    closes its nearest open match, or nothing.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        root = dict(tag="", hidden=False, seg=None, form=None, instr_box=False, instruction=False, reward=False)
        self.stack: list[dict[str, Any]] = [root]
        self.segments: list[_Segment] = []
        self.radios: list[dict[str, str]] = []
        self.search_form: dict[str, Any] | None = None
        self.instruction: list[str] = []
        self.reward_texts: list[str] = []
        self.visible: list[str] = []
        self._instruction_seen = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): (v or "") for k, v in attrs}
        ctx = dict(self.stack[-1], tag=tag)
        ctx["hidden"] = bool(
            ctx["hidden"] or tag in _INVISIBLE_TAGS or "hidden" in a or _DISPLAY_NONE.search(a.get("style", ""))
        )
        if tag == "form":
            ctx["form"] = {"action": a.get("action", ""), "method": (a.get("method") or "get").lower()}
        if tag == "input" and not ctx["hidden"]:
            if a.get("id") == "search_input" and ctx["form"] is not None and self.search_form is None:
                ctx["form"]["search"] = True
                self.search_form = ctx["form"]
            if a.get("type", "").lower() == "radio":
                self.radios.append(
                    dict(
                        id=a.get("id", ""), name=a.get("name", ""), value=a.get("value", ""), url=a.get("data-url", "")
                    )
                )
        if not ctx["hidden"] and ctx["seg"] is None:
            seg = None
            if tag == "button":
                seg = _Segment("button", form=ctx["form"])
            elif tag == "a" and "product-link" in a.get("class", "").split():
                seg = _Segment("product", href=a.get("href", ""))
            elif tag == "label":
                seg = _Segment("option", label_for=a.get("for", ""))
            if seg is not None:
                self.segments.append(seg)
                ctx["seg"] = seg
        if a.get("id") == "instruction-text":
            ctx["instr_box"] = True
        if ctx["instr_box"] and tag == "h4" and not self._instruction_seen:
            ctx["instruction"] = self._instruction_seen = True
        if a.get("id") == "reward":
            ctx["reward"] = True
        if tag not in _VOID_TAGS:
            self.stack.append(ctx)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i]["tag"] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        ctx = self.stack[-1]
        text = _norm(data)
        if ctx["hidden"] or not text:
            return
        self.visible.append(text)
        if ctx["reward"]:
            self.reward_texts.append(text)
        if ctx["instruction"]:
            self.instruction.append(text)
        elif ctx["seg"] is not None:
            ctx["seg"].texts.append(text)
        else:
            self.segments.append(_Segment("text", [text]))


@dataclasses.dataclass
class Page:
    """One page of the shop, parsed."""

    url: str
    kind: str  # "start" | "search_results" | "item_page" | "item_sub_page" | "done"
    instruction: str
    segments: list[_Segment]
    clickables: dict[str, Clickable]  # by _key(name), in page order
    search_url: str | None  # where the search form posts; None when there is no search box
    reward: float | None  # the done page's score
    selected: dict[str, str]  # options chosen so far (from the URL)

    def available_actions(self) -> list[str]:
        actions = ["search[<query>]"] if self.search_url is not None else []
        return actions + [f"click[{c.name}]" for c in self.clickables.values()]


def page_kind(url: str) -> str:
    for part in urllib.parse.urlsplit(url).path.split("/"):
        if part in PAGE_KINDS:
            return part
    return "start"


def selected_options(url: str) -> dict[str, str]:
    """The options in an item/done URL: its last segment is a dict literal (``str(dict)``)."""
    last = urllib.parse.urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    text = urllib.parse.unquote(last)
    if not text.startswith("{") or len(text) > 4096:
        return {}
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(text)
        except Exception:  # noqa: BLE001 - any unparsable literal means "no options"
            continue
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
    return {}


def parse_page(html_text: str, url: str) -> Page:
    parser = _PageParser()
    parser.feed(html_text)
    parser.close()
    radios = {r["id"]: r for r in parser.radios if r["id"]}
    clickables: dict[str, Clickable] = {}

    def add(c: Clickable) -> None:
        if c.name and _key(c.name) not in clickables:
            clickables[_key(c.name)] = c

    labelled: set[str] = set()
    for seg in parser.segments:
        if seg.kind == "button" and seg.form is not None and not seg.form.get("search"):
            action = urllib.parse.urljoin(url, seg.form["action"]) if seg.form["action"] else url
            add(Clickable(seg.text, "button", action, "post" if seg.form["method"] == "post" else "get"))
        elif seg.kind == "product" and seg.href:
            add(Clickable(seg.text, "product", urllib.parse.urljoin(url, seg.href)))
        elif seg.kind == "option":
            radio = radios.get(seg.label_for)
            if radio is not None and radio["url"]:
                labelled.add(radio["id"])
                name = _norm(radio["value"]) or seg.text
                add(Clickable(name, "option", urllib.parse.urljoin(url, radio["url"]), option_name=radio["name"]))
    for radio in parser.radios:  # radios without a label are clickable by value too
        if radio["url"] and radio["id"] not in labelled:
            radio_url = urllib.parse.urljoin(url, radio["url"])
            add(Clickable(_norm(radio["value"]), "option", radio_url, option_name=radio["name"]))

    reward = None
    for texts in (parser.reward_texts, parser.visible):
        m = _SCORE.search(" ".join(texts))
        if m is not None:
            reward = float(m.group(1))
            break
    instruction = _norm(" ".join(parser.instruction))
    if instruction.lower().startswith("instruction:"):
        instruction = instruction[len("instruction:") :].strip()
    search_url = None
    if parser.search_form is not None:
        action = parser.search_form["action"]
        search_url = urllib.parse.urljoin(url, action) if action else url
    return Page(
        url=url,
        kind=page_kind(url),
        instruction=instruction,
        segments=parser.segments,
        clickables=clickables,
        search_url=search_url,
        reward=reward,
        selected=selected_options(url),
    )


def render_page(page: Page, instruction: str, visited: set[str] = frozenset()) -> str:
    """The observation text: instruction, page text with clickable markers, available actions."""
    chosen = {_key(v) for v in page.selected.values()}
    chosen_by_group = {_key(k): _key(v) for k, v in page.selected.items()}
    radios = {k: c for k, c in page.clickables.items() if c.kind == "option"}
    lines = [f"Instruction: {instruction}"]
    for seg in page.segments:
        text = seg.text
        if not text:
            continue
        clicked = False
        if seg.kind == "option":
            c = radios.get(_key(text))
            if c is not None and _key(c.option_name) in chosen_by_group:
                clicked = chosen_by_group[_key(c.option_name)] == _key(text)
            else:
                clicked = _key(text) in chosen
        elif seg.kind == "product":
            clicked = _key(text) in visited
        if seg.kind == "text":
            lines.append(text)
        elif clicked:
            lines.append(f"[clicked button] {text} [clicked button_]")
        else:
            lines.append(f"[button] {text} [button_]")
    actions = page.available_actions()
    lines.append("")
    lines.append("Available actions:" if actions else "Available actions: none")
    lines.extend(actions)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Actions


def parse_action(action: Any) -> tuple[str, str] | str:
    """``(verb, argument)`` for ``search[...]`` / ``click[...]``, else the reason it is invalid."""
    if not isinstance(action, str):
        return f"the action is a {type(action).__name__}, not text"
    text = action.strip()
    if not text:
        return "empty action"
    if len(text) > MAX_ACTION_CHARS:
        return f"action longer than {MAX_ACTION_CHARS} characters"
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in text):
        return "control characters in the action"
    m = _ACTION.fullmatch(text)
    if m is None:
        return "not of the form search[query] or click[name]"
    verb, arg = m.group(1).lower(), _norm(m.group(2))
    if not arg:
        return f"empty {verb}[]"
    return verb, arg


class _NavigationError(Exception):
    """The server answered, but not with a page (HTTP 4xx/5xx, a malformed URL)."""

    def __init__(self, reason: str, status: int | None = None):
        super().__init__(reason)
        self.reason, self.status = reason, status


# ----------------------------------------------------------------------------------------------
# The environment


class WebShop:
    """One WebShop episode at a time over HTTP (see the module docstring)."""

    def __init__(self, base_url: str = DEFAULT_URL, max_steps: int = 10, timeout_s: float = 10.0):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.max_steps = int(max_steps)
        self.timeout_s = float(timeout_s)
        host = (parts.hostname or "").lower()
        local = host in ("localhost", "::1") or host.startswith("127.")
        # A proxy from the environment must not intercept a server on this machine.
        handlers = [urllib.request.ProxyHandler({})] if local else []
        self._opener = urllib.request.build_opener(*handlers)
        self.session_id: str | None = None
        self._page: Page | None = None
        self._instruction = ""
        self._visited: set[str] = set()
        self._steps = 0
        self._done = False
        self._observation = ""

    # -- protocol --------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> str:
        """Opens session ``fixed_{seed}`` (goal ``seed``; a random goal when None)."""
        if seed is None:
            self.session_id = f"session_{uuid.uuid4().hex[:16]}"
        else:
            seed = operator.index(seed)
            if seed < 0:
                raise ValueError(f"seed must be >= 0 (a WebShop goal index), got {seed}")
            self.session_id = f"fixed_{seed}"
        url = f"{self.base_url}/{self.session_id}"
        try:
            page = self._load(url)
        except _NavigationError as e:
            hint = f" (is goal index {seed} in range?)" if seed is not None and e.status == 500 else ""
            raise EnvError(f"WebShop server answered {e.reason}{hint}") from None
        if page.search_url is None:
            raise EnvError(f"the page at {url} has no search box (id=search_input): is it a WebShop server?")
        self._page, self._instruction = page, page.instruction
        self._visited = set()
        self._steps, self._done = 0, False
        self._observation = self._render()
        return self._observation

    def step(self, action: str) -> StepResult:
        if self._page is None:
            raise EnvError("WebShop.step() before reset()")
        if self._done:
            info = StepInfo(invalid=True, extra=self._extra(reason="the episode is over: call reset()"))
            return StepResult(self._observation, 0.0, True, info)
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
                query = _norm(arg.replace("/", " "))
                if not query:
                    return self._invalid("empty search[]")
                data = urllib.parse.urlencode({"search_query": query}).encode("utf-8")
                new = self._load(page.search_url, data)
                clicked = None
            else:
                clicked = page.clickables.get(_key(arg))
                if clicked is None:
                    return self._invalid(f"{arg!r} is not a button, product or option on this page")
                new = self._load(clicked.url, b"" if clicked.method == "post" else None)
        except _NavigationError as e:
            return self._invalid(f"the server answered {e.reason}", http_status=e.status)

        if clicked is not None and clicked.kind == "product":
            self._visited.add(_key(clicked.name))
        self._page = new
        if new.instruction:
            self._instruction = new.instruction
        bought = (clicked is not None and _key(clicked.name) == BUY_NOW) or new.kind == "done"
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
        return [] if self._page is None or self._done else self._page.available_actions()

    def _render(self) -> str:
        assert self._page is not None
        return render_page(self._page, self._instruction, self._visited)

    def _extra(self, **kw: Any) -> dict[str, Any]:
        page = self._page
        extra: dict[str, Any] = {
            "session_id": self.session_id,
            "step": self._steps,
            "page": page.kind if page else None,
            "url": page.url if page else None,
        }
        extra.update(kw)
        return extra

    def _invalid(self, reason: str, **kw: Any) -> StepResult:
        return self._finish(invalid=True, reason=reason, **kw)

    def _finish(self, invalid: bool, **kw: Any) -> StepResult:
        truncated = self._steps >= self.max_steps
        self._done = truncated
        info = StepInfo(truncated=truncated, invalid=invalid, extra=self._extra(**kw))
        return StepResult(self._observation, 0.0, truncated, info)

    def _load(self, url: str, data: bytes | None = None) -> Page:
        final_url, text = self._fetch(url, data)
        return parse_page(text, final_url)

    def _fetch(self, url: str, data: bytes | None = None) -> tuple[str, str]:
        """GET (or POST ``data``) ``url``, following redirects: (final URL, HTML)."""
        url = urllib.parse.quote(url, safe=_URL_SAFE)
        headers = {"User-Agent": "archer_jax-webshop", "Accept": "text/html"}
        if data is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                body = response.read(MAX_PAGE_BYTES + 1)
                final_url = response.geturl()
                charset = response.headers.get_content_charset() or "utf-8"
        except urllib.error.HTTPError as e:
            e.close()
            raise _NavigationError(f"HTTP {e.code} for {url}", e.code) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise self._timeout(url) from None
            raise EnvError(f"WebShop server unreachable at {url} ({_one_line(e.reason)}); {START_HINT}") from None
        except TimeoutError:
            raise self._timeout(url) from None
        except (http.client.HTTPException, OSError) as e:
            raise EnvError(f"WebShop server at {url} failed ({_one_line(e)}); {START_HINT}") from None
        except ValueError as e:  # a URL that http.client refuses
            raise _NavigationError(f"a malformed URL ({_one_line(e)})") from None
        if len(body) > MAX_PAGE_BYTES:
            raise _NavigationError(f"a page over {MAX_PAGE_BYTES} bytes at {url}")
        try:
            text = body.decode(charset, errors="replace")
        except LookupError:
            text = body.decode("utf-8", errors="replace")
        return final_url, text

    def _timeout(self, url: str) -> EnvError:
        return EnvError(f"WebShop server at {url} did not answer within {self.timeout_s:g} s; {START_HINT}")
