"""WebShop pages: the HTML the WebShop server renders, parsed into a :class:`Page`.

:func:`parse_page` reads a page as a browser shows it: the visible text in order, the
clickables (buttons in forms, ``a.product-link`` products, radio options with a ``data-url``),
the search box, the goal instruction and the done page's score. :func:`render_page` writes a
page as the observation text (the text form of WebShop's ``text_rich`` mode), and
:func:`parse_action` reads an action, ``search[query]`` or ``click[name]``.

Only the standard library is used (``html.parser``, ``urllib.parse``).
"""

from __future__ import annotations

import ast
import dataclasses
import html.parser
import json
import re
import unicodedata
import urllib.parse
from typing import Any

SCORE_LABEL = "Your score (min 0.0, max 1.0)"
MAX_ACTION_CHARS = 512  # longer actions are invalid (WebShop queries are a few words)
PAGE_KINDS = ("search_results", "item_page", "item_sub_page", "done")

_VOID_TAGS = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_INVISIBLE_TAGS = frozenset("head script style title meta template noscript".split())
_DISPLAY_NONE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_ACTION = re.compile(r"(search|click)\[(.*)\]", re.IGNORECASE | re.DOTALL)
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SCORE = re.compile(re.escape(SCORE_LABEL) + r"\s*:?\s*(" + _NUMBER + ")")


def norm_text(text: str) -> str:
    """Whitespace collapsed: the form in which page text is shown."""
    return " ".join(text.split())


def name_key(text: str) -> str:
    """How clickable names are matched: whitespace collapsed, case folded."""
    return norm_text(text).casefold()


# ----------------------------------------------------------------------------------------------
# HTML -> page


@dataclasses.dataclass(frozen=True)
class Clickable:
    """Something on a page that ``click[name]`` follows: a button, a product or an option."""

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
        return norm_text(" ".join(self.texts))


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
        text = norm_text(data)
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
    clickables: dict[str, Clickable]  # by name_key(name), in page order
    search_url: str | None  # where the search form posts; None when there is no search box
    reward: float | None  # the done page's score
    selected: dict[str, str]  # options chosen so far (from the URL)

    def available_actions(self) -> list[str]:
        """``search[<query>]`` where there is a search box, then ``click[name]`` per clickable."""
        actions = ["search[<query>]"] if self.search_url is not None else []
        return actions + [f"click[{c.name}]" for c in self.clickables.values()]


def page_kind(url: str) -> str:
    """The page's kind from its URL path (one of ``PAGE_KINDS``), else ``"start"``."""
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
    """The page that ``html_text`` renders; ``url`` (where it was fetched) resolves its links."""
    parser = _PageParser()
    parser.feed(html_text)
    parser.close()
    radios = {r["id"]: r for r in parser.radios if r["id"]}
    clickables: dict[str, Clickable] = {}

    def add(c: Clickable) -> None:
        if c.name and name_key(c.name) not in clickables:
            clickables[name_key(c.name)] = c

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
                name = norm_text(radio["value"]) or seg.text
                add(Clickable(name, "option", urllib.parse.urljoin(url, radio["url"]), option_name=radio["name"]))
    for radio in parser.radios:  # radios without a label are clickable by value too
        if radio["url"] and radio["id"] not in labelled:
            radio_url = urllib.parse.urljoin(url, radio["url"])
            add(Clickable(norm_text(radio["value"]), "option", radio_url, option_name=radio["name"]))

    reward = None
    for texts in (parser.reward_texts, parser.visible):
        m = _SCORE.search(" ".join(texts))
        if m is not None:
            reward = float(m.group(1))
            break
    instruction = norm_text(" ".join(parser.instruction))
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
    chosen = {name_key(v) for v in page.selected.values()}
    chosen_by_group = {name_key(k): name_key(v) for k, v in page.selected.items()}
    radios = {k: c for k, c in page.clickables.items() if c.kind == "option"}
    lines = [f"Instruction: {instruction}"]
    for seg in page.segments:
        text = seg.text
        if not text:
            continue
        clicked = False
        if seg.kind == "option":
            c = radios.get(name_key(text))
            if c is not None and name_key(c.option_name) in chosen_by_group:
                clicked = chosen_by_group[name_key(c.option_name)] == name_key(text)
            else:
                clicked = name_key(text) in chosen
        elif seg.kind == "product":
            clicked = name_key(text) in visited
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
    verb, arg = m.group(1).lower(), norm_text(m.group(2))
    if not arg:
        return f"empty {verb}[]"
    return verb, arg
