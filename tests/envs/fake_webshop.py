"""A stand-in of the WebShop Flask server for the tests (localhost only, in this process).

It serves pages saved in the real templates' rendered form (tests/envs/webshop_pages/) on the
real URL shapes of princeton-nlp/WebShop's ``web_agent_site/app.py``: ``/<session_id>`` (POST
``search_query`` redirects), ``/search_results/<sid>/<keywords>/<page>``,
``/item_page/<sid>/<asin>/<keywords>/<page>/<options>``,
``/item_sub_page/<sid>/<asin>/<keywords>/<page>/<sub_page>/<options>``,
``/done/<sid>/<asin>/<options>``. Lists and dicts go into the path as ``str(value)``, quoted the
way werkzeug's ``url_for`` quotes them.

Goals: session ``fixed_<n>`` plays goal ``n`` of the handler's ``instructions``; an index out of
range (negative included) is an HTTP 500, as the real app's ``goals[idx]`` IndexError is. Any
other session id draws a goal. ``serve(handler)`` runs a server in a thread;
``shop(instructions)`` makes a handler class with its own goals, sessions and request log.
"""

from __future__ import annotations

import ast
import contextlib
import html
import http.server
import json
import pathlib
import re
import threading
import urllib.parse
from collections.abc import Iterator

PAGES = pathlib.Path(__file__).parent / "webshop_pages"
TARGET = "B0TARGET01"
GOAL_OPTIONS = {"color": "blue", "size": "m"}
INSTRUCTIONS = [
    f"i need a blue crew neck t-shirt in size m, and price lower than 30.00 dollars (goal {i})" for i in range(5)
]
PRODUCTS = {
    TARGET: ("Men's Classic Crew Neck T-Shirt, Short Sleeve Cotton Tee", "$19.99"),
    "B0OTHER002": ("Women's High Waist Yoga Pants & Leggings", "$24.5"),
    "B0OTHER003": ("Cotton Crew Socks 6-Pack", "$9.99 to $12.99"),
    "B0COMMENT9": ("Only linked from an HTML comment", "$1.0"),
}
OPTION_ORDER = [("color", "blue"), ("color", "red"), ("size", "s"), ("size", "m")]


def url_part(value) -> str:
    """``url_for`` puts ``str(value)`` in the path with werkzeug's quoting (safe: ``/:`` and sub-delims)."""
    return urllib.parse.quote(str(value), safe="/:$!'()*+,;")


def render(name: str, **values) -> bytes:
    text = (PAGES / name).read_text(encoding="utf-8")

    def fill(m: re.Match) -> str:
        return html.escape(str(values[m.group(1)]), quote=True)

    return re.sub(r"\{\{(\w+)\}\}", fill, text).encode("utf-8")


class Shop(http.server.BaseHTTPRequestHandler):
    instructions: list[str] = INSTRUCTIONS
    sessions: dict[str, str] = {}
    requests: list[tuple[str, str]] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _send(self, status: int, body: bytes = b"", location: str | None = None) -> None:
        self.send_response(status)
        if location is not None:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self, method: str) -> None:
        path = urllib.parse.urlsplit(self.path).path
        self.requests.append((method, path))
        parts = [urllib.parse.unquote(p) for p in path.split("/")[1:]]
        form = {}
        if method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8"))
        try:
            if len(parts) == 1 and parts[0]:
                return self._index(parts[0], form)
            sid = parts[1] if len(parts) > 1 else ""
            if parts[0] not in ("search_results", "item_page", "item_sub_page", "done"):
                return self._send(404)
            if sid not in self.sessions:  # user_sessions[session_id] -> KeyError
                return self._send(500)
            goal = self.sessions[sid]
            if parts[0] == "search_results" and len(parts) == 4:
                keywords = ast.literal_eval(parts[2]) if parts[2].startswith("[") else [parts[2]]
                body = render(
                    "results_page.html",
                    session_id=sid,
                    instruction_text=goal,
                    query_words="".join(f" {k} " for k in keywords),
                    keywords_url=url_part(keywords),
                )
                return self._send(200, body)
            if parts[0] == "item_page" and len(parts) == 6:
                return self._item(sid, goal, parts[2], parts[3], parts[4], ast.literal_eval(parts[5]))
            if parts[0] == "item_sub_page" and len(parts) == 7:
                asin, keywords, page, options = parts[2], parts[3], parts[4], ast.literal_eval(parts[6])
                body = render(
                    "description_page.html",
                    session_id=sid,
                    instruction_text=goal,
                    keywords=keywords,
                    keywords_url=url_part(keywords),
                    page=page,
                    asin=asin,
                    options_url=url_part(options),
                    description=f"{parts[5]} of {asin}: soft 100% cotton.",
                )
                return self._send(200, body)
            if parts[0] == "done" and len(parts) == 4:
                asin, options = parts[2], ast.literal_eval(parts[3])
                if asin == TARGET:
                    reward = 1.0 if options == GOAL_OPTIONS else 0.6666666666666666
                else:
                    reward = 0.25
                body = render(
                    "done_page.html",
                    mturk_code=f"{sid.upper()}_CODE",
                    asin=asin,
                    options_json=json.dumps(options),
                    instruction_text=goal,
                    reward=reward,
                )
                return self._send(200, body)
            return self._send(404)
        except Exception:  # like Flask: a failing view is a 500
            return self._send(500)

    def _index(self, sid: str, form: dict) -> None:
        if sid not in self.sessions:
            if "fixed" in sid:
                index = int(sid.split("_")[-1])
                if not 0 <= index < len(self.instructions):  # the real app: goals[idx] -> IndexError -> 500
                    return self._send(500)
                self.sessions[sid] = self.instructions[index]
            else:
                self.sessions[sid] = self.instructions[len(sid) % len(self.instructions)]
        if "search_query" in form:
            keywords = form["search_query"][0].lower().split(" ")
            return self._send(302, location=f"/search_results/{url_part(sid)}/{url_part(keywords)}/1")
        body = render("search_page.html", session_id=sid, instruction_text=self.sessions[sid])
        return self._send(200, body)

    def _item(self, sid: str, goal: str, asin: str, keywords: str, page: str, options: dict) -> None:
        if asin not in PRODUCTS:
            return self._send(500)  # product_item_dict[asin] -> KeyError
        title, price = PRODUCTS[asin]
        urls = {}
        for i, (name, value) in enumerate(OPTION_ORDER):
            current = dict(options, **{name: value})
            urls[f"opt_url_{i}"] = f"/item_page/{sid}/{asin}/{url_part(keywords)}/{page}/{url_part(current)}"
        body = render(
            "item_page.html",
            session_id=sid,
            instruction_text=goal,
            keywords=keywords,
            keywords_url=url_part(keywords),
            page=page,
            asin=asin,
            title=title,
            price=price,
            main_image=f"https://m.media-amazon.com/images/I/{asin}.jpg",
            options_url=url_part(options),
            options_json=json.dumps(options),
            **urls,
        )
        return self._send(200, body)


def shop(instructions: list[str] | None = None) -> type[Shop]:
    """A handler class serving ``instructions`` as its goals (default: the 5 of INSTRUCTIONS),
    with its own sessions and request log."""
    goals = list(INSTRUCTIONS if instructions is None else instructions)
    return type("ShopWithGoals", (Shop,), {"instructions": goals, "sessions": {}, "requests": []})


@contextlib.contextmanager
def serve(handler: type[Shop] = Shop) -> Iterator[str]:
    """Serves ``handler`` on a free localhost port in a thread; yields the base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
