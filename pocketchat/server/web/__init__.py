"""The web chat at `/` of `pocketchat serve`: the page, its sign-in, and the small API it talks to.

    GET  /                        the chat page (static/index.html); its scripts and styles beside it
    GET  /signin                  the sign-in page (a server with an API key)
    POST /web/api/signin          {"key"} -> a session cookie (HttpOnly, SameSite=Strict)
    GET  /web/api/info            the model, its backend and placement, the server's state
    GET|POST /web/api/chats       the saved conversations (the terminal chat's store) / a new one
    GET|PATCH|DELETE /web/api/chats/{id}
    POST /web/api/chats/{id}/answer   a message answered as server-sent events, saved as it streams
    POST /web/api/chats/{id}/tools/{call_id}   the page's answer to a tool call waiting for it

The page is static (no build step, no outside origin) and builds every node from text, so a
model's answer, a file name or a saved chat never runs as HTML; the pages are served with a
Content-Security-Policy that allows scripts and styles from this server alone (pages.py).
Conversations are the terminal chat's files (conversations/), so a chat goes on in either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.routing import Route

from pocketchat.server.host import EngineHost
from pocketchat.server.web.answer import WebAnswer
from pocketchat.server.web.chats import Chats
from pocketchat.server.web.pages import OPEN_PAGES, page_routes
from pocketchat.server.web.signin import SESSION_COOKIE, Sessions, signin_routes
from pocketchat.server.web.webtools import WebTools

if TYPE_CHECKING:
    from pocketchat.tools.servers import ToolServers


def web_routes(host: EngineHost, *, model_id: str, model_info: dict[str, Any],
               sessions: Sessions, api_key: str | None, thinking: Any,
               tools: ToolServers | None = None) -> list[Route]:
    """Every route of the web chat (`create_app` adds them beside the APIs); `tools`: the MCP
    servers the web chat's model may call (webtools.py)."""
    web_tools = WebTools(tools)
    chats = Chats(host, model_id, model_info, web_tools)
    answer = WebAnswer(host, model_id, chats, web_tools)
    answer.thinking = thinking
    return [*page_routes(), *signin_routes(sessions, api_key), *chats.routes(),
            *web_tools.routes(), Route("/web/api/chats/{id}/answer", answer, methods=["POST"])]


__all__ = ["web_routes", "Sessions", "SESSION_COOKIE", "OPEN_PAGES"]
