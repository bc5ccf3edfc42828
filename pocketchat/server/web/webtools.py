"""The web chat's tools: the MCP servers `serve --mcp` (or the config folder's mcp.json) names,
offered to the model in the web chat only, each call confirmed in the page.

A call of a tool that is not marked safe, and not answered "always" or "never" in this chat
before, is sent to the page as a `tool_call` event and waits (at most CONFIRM_SECONDS) for the
page's answer: POST /web/api/chats/{id}/tools/{call_id} {"choice": once|always|never|deny}.
A page that goes away while one waits denies it. A refused call, like a result, goes back to the
model as the tool's message, so it knows. The answers "always" and "never" are saved with the
chat (`Conversation.tool_answers`). API clients bring their own tools: nothing here reaches them.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Sequence

import anyio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pocketchat.conversations import Conversation
from pocketchat.engines.types import ToolCall
from pocketchat.tools.loop import offered, settle
from pocketchat.tools.permissions import Permissions

if TYPE_CHECKING:
    from pocketchat.tools.servers import ToolServers
    from pocketchat.tools.tool import Tool

CONFIRM_SECONDS = 600.0
CHOICES = ("once", "always", "never", "deny")
SHOWN_CHARS = 4000  # of a result, in the page (the model gets the whole result)


class WebTools:
    """The tool servers behind the web chat (none: no tools offered) and the calls waiting
    for the page's answer."""

    def __init__(self, servers: ToolServers | None) -> None:
        self.servers = servers
        self._waiting: dict[str, asyncio.Future[str]] = {}

    async def listed(self) -> list[Tool]:
        if self.servers is None:
            return []
        return await anyio.to_thread.run_sync(self.servers.tools)

    offered = staticmethod(offered)

    async def run_calls(self, chat: Conversation, calls: Sequence[ToolCall],
                        tools: Sequence[Tool], out: Any) -> None:
        """Each call confirmed (or not) and run, its result added to `chat` as a tool turn."""
        by_name = {t.name: t for t in tools}
        permissions = Permissions.from_json(chat.tool_answers)
        for call in calls:
            async def ask(asking: bool, call: ToolCall = call) -> str | None:
                await out.event({"event": "tool_call", "call_id": call.id, "name": call.name,
                                 "arguments": call.arguments, "ask": asking})
                return await self._ask(call.id) if asking else None

            done = await settle(call, by_name.get(call.name), permissions, self.servers, ask)
            chat.tool_answers = permissions.to_json()
            await out.event({"event": "tool_result", "call_id": call.id, "ok": done.ok,
                             "text": done.text[:SHOWN_CHARS], "note": done.note})
            chat.add("tool", done.text, tool_call_id=call.id, name=call.name)

    async def _ask(self, call_id: str) -> str:
        waiting: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = waiting
        try:
            return await asyncio.wait_for(waiting, CONFIRM_SECONDS)
        except asyncio.TimeoutError:
            return "deny"
        finally:
            self._waiting.pop(call_id, None)

    def routes(self) -> list[Route]:
        async def decide(request: Request) -> Response:
            try:
                choice = json.loads(await request.body()).get("choice")
            except (ValueError, AttributeError):
                choice = None
            if choice not in CHOICES:
                return JSONResponse({"error": {"message": f"choice must be one of "
                                                          f"{', '.join(CHOICES)}"}}, status_code=400)
            waiting = self._waiting.get(request.path_params["call_id"])
            if waiting is None or waiting.done():
                return JSONResponse({"error": {"message": "no tool call is waiting for an "
                                                          "answer by that id"}}, status_code=404)
            waiting.set_result(choice)
            return Response(status_code=204)

        return [Route("/web/api/chats/{id}/tools/{call_id}", decide, methods=["POST"])]
