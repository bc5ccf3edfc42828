"""The web chat's files, served from the package (static/): the two pages and their scripts and
styles, each at `/NAME` and `/web/NAME`, with headers that keep the page to this server alone.

Only the files the package ships are served (listed once, at import): no path from a request
ever reaches the file system. Every response carries the Content-Security-Policy below (no
inline script or style, no other origin, no framing) and `nosniff`.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

STATIC = resources.files("pocketchat.server.web") / "static"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
         ".ico": "image/x-icon", ".json": "application/json"}
PAGES = {"/": "index.html", "/signin": "signin.html", "/favicon.ico": "favicon.svg"}


def _assets() -> dict[str, str]:
    """URL path -> file name, for every file the package ships (pages and assets)."""
    names = sorted(p.name for p in STATIC.iterdir() if p.is_file()
                   and any(p.name.endswith(ext) for ext in TYPES))
    paths = {path: name for path, name in PAGES.items() if name in names}
    for name in names:
        if name.endswith(".html"):
            continue  # a page has its own path
        paths[f"/{name}"] = name
        paths[f"/web/{name}"] = name
    return paths


ASSETS = _assets()
OPEN_PAGES = frozenset(ASSETS)  # served without the API key: the page asks for it itself


def headers(content_type: str) -> dict[str, str]:
    return {"content-type": content_type, "content-security-policy": CSP,
            "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
            "cache-control": "no-cache"}


def _serve(name: str) -> Any:
    body = (STATIC / name).read_bytes()
    kind = TYPES[name[name.rfind("."):]]

    async def endpoint(_: Request) -> Response:
        return Response(body, headers=headers(kind))

    return endpoint


def page_routes() -> list[Route]:
    return [Route(path, _serve(name), methods=["GET", "HEAD"]) for path, name in ASSETS.items()]
