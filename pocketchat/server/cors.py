"""Which web pages may call the server from a browser (CORS), and the headers that say so.

Policy: pages served from this machine (`http(s)://localhost`, `127.x.x.x`, `[::1]`, any
port) may, and so may each origin given with `--cors-origin ORIGIN`; `--cors-origin '*'`
lets any page (with an API key set, a page still needs the key). A browser's preflight
(`OPTIONS` with `Access-Control-Request-Method`) is answered without the key, as browsers
never send one there; it passes the Host check all the same, so a DNS-rebinding page (whose
Host and Origin are its own name) is still refused. Every response to an allowed origin, the
401 and 429 refusals included, carries `Access-Control-Allow-Origin`, so the page can read why.

`Cors` wraps the whole application (outside `Guard`); `Preflight` sits inside `Guard` and
answers the preflights that got past it.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence
from urllib.parse import urlsplit

from pocketchat.errors import ApiError, UsageError
from pocketchat.server.guard import request_headers, send_error

LOOPBACK_ORIGIN = re.compile(r"^https?://(localhost|127(\.\d{1,3}){3}|\[::1\])(:\d{1,5})?$")
ALLOW_METHODS = b"GET, POST, OPTIONS"
DEFAULT_ALLOW_HEADERS = b"Authorization, Content-Type"
EXPOSE_HEADERS = b"Retry-After, WWW-Authenticate"
MAX_AGE = b"600"


def parse_origin(value: str) -> str:
    """A `--cors-origin` value: '*' or SCHEME://HOST[:PORT] (lowercased); UsageError if not."""
    text = value.strip().rstrip("/").lower()
    if text == "*":
        return text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query \
            or parts.fragment or parts.username or parts.password:
        raise UsageError(f"--cors-origin {value!r} is not an origin",
                         hint="Give SCHEME://HOST[:PORT] as the browser sends it, e.g. "
                              "--cors-origin https://app.example.com, or '*' for any page.")
    return text


class CorsPolicy:
    """The origins whose pages may read the server's responses."""

    def __init__(self, origins: Sequence[str] = ()) -> None:
        self.origins = frozenset(parse_origin(o) for o in origins)
        self.any = "*" in self.origins

    def allows(self, origin: str) -> bool:
        origin = origin.strip().rstrip("/").lower()
        return self.any or origin in self.origins or bool(LOOPBACK_ORIGIN.match(origin))

    def header_value(self, origin: str) -> bytes:
        return b"*" if self.any else origin.encode("latin-1")


def _is_preflight(scope: dict, headers: dict[str, str]) -> bool:
    return scope["method"] == "OPTIONS" and "access-control-request-method" in headers


class Cors:
    """ASGI middleware: CORS headers on every response to an allowed origin."""

    def __init__(self, app: Callable, policy: CorsPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = request_headers(scope)
        origin = headers.get("origin")
        if origin is None:
            return await self.app(scope, receive, send)
        preflight = _is_preflight(scope, headers)
        if not self.policy.allows(origin):
            if preflight:
                return await send_error(send, ApiError(
                    f"web pages from {origin} may not use this server", status=403,
                    type="permission_error", code="origin_not_allowed",
                    hint="Start the server with --cors-origin ORIGIN to let that page call it."))
            return await self.app(scope, receive, send)
        extra = [(b"access-control-allow-origin", self.policy.header_value(origin)),
                 (b"vary", b"Origin"), (b"access-control-expose-headers", EXPOSE_HEADERS)]
        if preflight:
            asked = headers.get("access-control-request-headers", "").strip()
            extra += [(b"access-control-allow-methods", ALLOW_METHODS),
                      (b"access-control-allow-headers",
                       asked.encode("latin-1") if asked else DEFAULT_ALLOW_HEADERS),
                      (b"access-control-max-age", MAX_AGE)]

        async def send_with_cors(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


class Preflight:
    """ASGI middleware: answers OPTIONS itself (204), passes every other request on."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] != "OPTIONS":
            return await self.app(scope, receive, send)
        await send({"type": "http.response.start", "status": 204,
                    "headers": [(b"allow", ALLOW_METHODS)]})
        await send({"type": "http.response.body", "body": b""})
