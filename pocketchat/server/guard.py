"""Who may talk to the server: the API key and, on loopback, the Host header.

- API key: required on every path but /health, /openapi.json and the web chat's pages when one
  is set (`Authorization: Bearer KEY`, or `x-api-key: KEY` as Anthropic's clients send it, or a
  browser's session cookie from the web chat's sign-in),
  compared in constant time (both sides hashed first, so not even the length leaks). OPTIONS
  (a browser's CORS preflight, which never carries the key) needs none: it is answered with
  headers only (cors.py), and no model is reached.
- Loopback without a key: only requests addressed to localhost / 127.0.0.1 / [::1], or to the
  loopback address the request arrived on (`serve --host 127.0.0.2`), are served. This stops
  DNS rebinding (evil.example resolving to 127.0.0.1) from reaching the model; which pages may
  read answers is cors.py's policy.
- POST bodies must be `application/json`: a browser cannot send that cross-origin without a
  preflight, which cors.py grants only to the allowed origins.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from typing import Any, Callable

from pocketchat.errors import ApiError

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
OPEN_PATHS = {"/health", "/openapi.json"}


def host_name(host_header: str) -> str:
    """'localhost:8080' -> 'localhost', '[::1]:8080' -> '::1'."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback_ip(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_allowed(host_header: str, server: tuple | None) -> bool:
    """Whether a Host header names this loopback server: a loopback name, or the loopback
    address the connection arrived on (the one `--host` asked for)."""
    name = host_name(host_header)
    if name in LOOPBACK_NAMES:
        return True
    local = str(server[0]).strip("[]").lower() if server else ""
    return bool(local) and name == local and is_loopback_ip(local)


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def key_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(_digest(given), _digest(expected))


class Guard:
    """ASGI middleware: API key, Host check, JSON content type; refusals in OpenAI's shape."""

    def __init__(self, app: Callable, *, api_key: str | None, loopback_only: bool,
                 open_paths: frozenset[str] = frozenset(),
                 signed_in: Callable[[dict[str, str]], bool] | None = None) -> None:
        self.app = app
        self.api_key = api_key
        self.loopback_only = loopback_only
        self.open_paths = OPEN_PATHS | open_paths  # the web chat's pages: they ask for the key
        self.signed_in = signed_in  # a browser's session cookie, in place of the key

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = request_headers(scope)
        refusal = self.check(scope, headers)
        if refusal is not None:
            return await send_error(send, refusal, scope["path"])
        return await self.app(scope, receive, send)

    def check(self, scope: dict, headers: dict[str, str]) -> ApiError | None:
        if self.loopback_only and not host_allowed(headers.get("host", ""), scope.get("server")):
            return ApiError("this server answers only requests addressed to localhost or to the "
                            "loopback address it listens on",
                            status=403, type="permission_error", code="host_not_allowed")
        if self.api_key and scope["path"] not in self.open_paths and scope["method"] != "OPTIONS":
            auth = headers.get("authorization", "")
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key", "")
            if not key_matches(token, self.api_key) and not (
                    self.signed_in is not None and self.signed_in(headers)):
                return ApiError("missing or wrong API key", status=401, type="authentication_error",
                                code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"},
                                hint="Send it as the header `Authorization: Bearer KEY` "
                                     "(the --api-key the server was started with).")
        if scope["method"] == "POST":
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return ApiError(f"the request body must be JSON (Content-Type: application/json), "
                                f"got {ctype or 'no content type'}", status=415,
                                code="unsupported_media_type")
        return None


def request_headers(scope: dict) -> dict[str, str]:
    """An ASGI request's headers by lower-case name (HTTP's bytes read as Latin-1)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def send_json(send: Callable, status: int, body: Any,
                    headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})


def error_for(exc: ApiError, path: str) -> dict[str, Any]:
    """`exc` in the shape of the protocol `path` belongs to (Anthropic's for /v1/messages,
    Ollama's for /api)."""
    if path.removeprefix("/v1").startswith("/messages"):
        from pocketchat.server.protocols.anthropic.encode import error_body
    elif path.startswith("/api/"):
        from pocketchat.server.protocols.ollama.encode import error_body
    else:
        from pocketchat.server.protocols.openai.encode import error_body
    return error_body(exc)


async def send_error(send: Callable, exc: ApiError, path: str = "") -> None:
    """A refusal in the shape of the protocol `path` belongs to."""
    await send_json(send, exc.status, error_for(exc, path), exc.headers)
