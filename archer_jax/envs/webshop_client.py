"""An HTTP client of a running WebShop server: it fetches pages and parses them, nothing more.

The server is princeton-nlp/WebShop's Flask app (``python -m web_agent_site.app --log --attrs``,
port 3000), as the official ArCHer code used it. The client behaves like a browser: it reads the
HTML the server renders and follows what is on the page, so the URL shapes are the server's own:

    /<session_id>                                    start page (search box); POST search_query
                                                     redirects to the results
    /search_results/<session_id>/<keywords>/<page>   results: ``a.product-link`` per product
    /item_page/<session_id>/<asin>/<keywords>/<page>/<options>
                                                     product: radio options (``data-url``),
                                                     buttons in POST forms (Buy Now, ...)
    /item_sub_page/<session_id>/<asin>/<keywords>/<page>/<sub_page>/<options>
    /done/<session_id>/<asin>/<options>              "Your score (min 0.0, max 1.0)" + reward

The session id ``fixed_<n>`` makes the server use goal ``n``; any other id draws a random goal.

A server that cannot be reached, fails or does not answer in time is an :class:`EnvError`; a
server that answers, but not with a page (HTTP 4xx/5xx, a malformed URL, a page too large), is a
:class:`NavigationError`, which the caller may treat as an invalid action.

Only the standard library is used (``urllib.request``).
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from archer_jax.envs.base import EnvError
from archer_jax.envs.webshop_page import Clickable, Page, norm_text, parse_page

DEFAULT_URL = "http://127.0.0.1:3000"
MAX_PAGE_BYTES = 16 << 20
START_HINT = (
    "start the WebShop server (princeton-nlp/WebShop: `python -m web_agent_site.app --log --attrs`) "
    "or pass its base_url"
)

_URL_SAFE = "%/:=&?~#+!$,;'@()*[]"  # keep what is already escaped or reserved


def _one_line(text: Any) -> str:
    return norm_text(str(text)) or type(text).__name__


class NavigationError(Exception):
    """The server answered, but not with a page (HTTP 4xx/5xx, a malformed URL)."""

    def __init__(self, reason: str, status: int | None = None):
        super().__init__(reason)
        self.reason, self.status = reason, status


class WebShopClient:
    """Fetches WebShop pages from the server at ``base_url``, waiting at most ``timeout_s``."""

    def __init__(self, base_url: str = DEFAULT_URL, timeout_s: float = 10.0):
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = float(timeout_s)
        host = (parts.hostname or "").lower()
        local = host in ("localhost", "::1") or host.startswith("127.")
        # A proxy from the environment must not intercept a server on this machine.
        handlers = [urllib.request.ProxyHandler({})] if local else []
        self._opener = urllib.request.build_opener(*handlers)

    def session_url(self, session_id: str) -> str:
        """The start page (search box) of session ``session_id``."""
        return f"{self.base_url}/{session_id}"

    def load(self, url: str, data: bytes | None = None) -> Page:
        """GET (or POST ``data``) ``url``, following redirects, and parse the page it ends on."""
        final_url, text = self._fetch(url, data)
        return parse_page(text, final_url)

    def search(self, search_url: str, query: str) -> Page:
        """Submit ``query`` to the search form that posts to ``search_url``: the results page."""
        return self.load(search_url, urllib.parse.urlencode({"search_query": query}).encode("utf-8"))

    def click(self, clickable: Clickable) -> Page:
        """Follow a clickable: its link, or its form's POST for a button."""
        return self.load(clickable.url, b"" if clickable.method == "post" else None)

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
            raise NavigationError(f"HTTP {e.code} for {url}", e.code) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise self._timeout(url) from None
            raise EnvError(f"WebShop server unreachable at {url} ({_one_line(e.reason)}); {START_HINT}") from None
        except TimeoutError:
            raise self._timeout(url) from None
        except (http.client.HTTPException, OSError) as e:
            raise EnvError(f"WebShop server at {url} failed ({_one_line(e)}); {START_HINT}") from None
        except ValueError as e:  # a URL that http.client refuses
            raise NavigationError(f"a malformed URL ({_one_line(e)})") from None
        if len(body) > MAX_PAGE_BYTES:
            raise NavigationError(f"a page over {MAX_PAGE_BYTES} bytes at {url}")
        try:
            text = body.decode(charset, errors="replace")
        except LookupError:
            text = body.decode("utf-8", errors="replace")
        return final_url, text

    def _timeout(self, url: str) -> EnvError:
        return EnvError(f"WebShop server at {url} did not answer within {self.timeout_s:g} s; {START_HINT}")
