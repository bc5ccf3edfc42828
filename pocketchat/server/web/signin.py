"""Signing a browser in to a server that has an API key: the key typed once on /signin becomes a
session cookie, which the guard takes in place of the `Authorization` header.

A session is a random token this process keeps (at most MAX_SESSIONS, each for SESSION_DAYS;
a restart signs everyone out); the cookie is HttpOnly, SameSite=Strict (no other site's page
can send it) and Secure when the request came over TLS (directly or through a proxy that says
so). A wrong key waits FAILED_WAIT seconds before its 401, so a key cannot be guessed quickly.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import OrderedDict

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pocketchat.server.guard import key_matches

SESSION_COOKIE = "pocketchat_session"
SESSION_DAYS = 30
MAX_SESSIONS = 64
FAILED_WAIT = 0.5


class Sessions:
    """The browsers signed in to this server (tokens in memory, oldest dropped first)."""

    def __init__(self, days: float = SESSION_DAYS, limit: int = MAX_SESSIONS) -> None:
        self.lifetime = days * 86400
        self.limit = limit
        self._tokens: OrderedDict[str, float] = OrderedDict()  # token -> expiry (epoch)

    def open(self) -> str:
        token = secrets.token_urlsafe(32)
        self._tokens[token] = time.time() + self.lifetime
        while len(self._tokens) > self.limit:
            self._tokens.popitem(last=False)
        return token

    def valid(self, token: str | None) -> bool:
        if not token:
            return False
        expiry = self._tokens.get(token)
        if expiry is None:
            return False
        if expiry < time.time():
            del self._tokens[token]
            return False
        return True

    def close(self, token: str | None) -> None:
        self._tokens.pop(token or "", None)


def cookie_of(headers: dict[str, str]) -> str | None:
    """The session token a request's Cookie header carries, if any."""
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == SESSION_COOKIE:
            return value
    return None


def _secure(request: Request) -> bool:
    return request.url.scheme == "https" or \
        request.headers.get("x-forwarded-proto", "").lower() == "https"


def signin_routes(sessions: Sessions, api_key: str | None) -> list[Route]:
    async def signin(request: Request) -> Response:
        try:
            key = json.loads(await request.body()).get("key")
        except (ValueError, AttributeError):
            key = None
        if not isinstance(key, str) or not key:
            return JSONResponse({"error": {"message": "send the API key as {\"key\": \"...\"}"}},
                                status_code=400)
        if api_key is None:  # nothing to sign in to: every page is open
            return Response(status_code=204)
        if not key_matches(key, api_key):
            await asyncio.sleep(FAILED_WAIT)
            return JSONResponse({"error": {"message": "that key is not this server's API key "
                                           "(the --api-key it was started with)"}}, status_code=401)
        response = Response(status_code=204)
        response.set_cookie(SESSION_COOKIE, sessions.open(), max_age=int(sessions.lifetime),
                            httponly=True, samesite="strict", secure=_secure(request), path="/")
        return response

    async def signout(request: Request) -> Response:
        sessions.close(request.cookies.get(SESSION_COOKIE))
        response = Response(status_code=204)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    return [Route("/web/api/signin", signin, methods=["POST"]),
            Route("/web/api/signout", signout, methods=["POST"])]
