"""The web chat's conversations: the terminal chat's saved files (conversations/), listed, made,
renamed, given a system prompt or thinking budget, and deleted over JSON.

A chat's id comes from the URL and is checked against CHAT_ID before it names a file, so no
request reaches a path outside the conversations folder. A new chat without a message stays in
this process (`Chats.pending`) until its first answer: no empty file for `--continue` to open. A chat open in a terminal (it holds
the file) is not deleted: 409 says where it is open.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pocketchat import conversations
from pocketchat.conversations import ChatMessage, Conversation
from pocketchat.errors import ApiError
from pocketchat.server.host import EngineHost

CHAT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,80}")
MAX_SYSTEM_CHARS = 64_000
MAX_TITLE_CHARS = 200


def refusal(exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": {"message": exc.message, "code": exc.code}},
                        status_code=exc.status)


def load(chat_id: str) -> Conversation:
    """The saved chat with this id; 404 when there is none."""
    if not CHAT_ID.fullmatch(chat_id):
        raise ApiError(f"{chat_id!r} is not a chat id", status=404, code="chat_not_found")
    try:
        return conversations.load(chat_id)
    except FileNotFoundError:
        raise ApiError(f"no saved chat has the id {chat_id!r}", status=404,
                       code="chat_not_found") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ApiError(f"the chat {chat_id} cannot be read: {exc}", status=500,
                       code="chat_unreadable") from None


def message_json(message: ChatMessage) -> dict[str, Any]:
    """A turn as the page shows it: as saved, but a file only by its name, kind and size."""
    data = message.to_json()
    data["attachments"] = [{"name": a.name, "kind": a.kind, "pages": a.pages or None,
                            "size": a.size} for a in message.attachments]
    return data


def chat_json(chat: Conversation) -> dict[str, Any]:
    return {"id": chat.id, "title": chat.display_title if chat.messages else chat.title,
            "system": chat.system, "thinking_budget": chat.thinking_budget,
            "updated": chat.updated or chat.created, "forked_from": chat.forked_from,
            "messages": [message_json(m) for m in chat.messages
                         if m.role in ("user", "assistant", "tool")]}


def apply_settings(chat: Conversation, body: Any) -> None:
    """A PATCH's (or a new chat's) fields onto `chat`; 400 naming a wrong one."""
    if not isinstance(body, dict):
        raise ApiError("send a JSON object", status=400, code="invalid_request")
    if "title" in body:
        title = body["title"]
        if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
            raise ApiError(f"title must be text of at most {MAX_TITLE_CHARS} characters",
                           status=400, code="invalid_request", param="title")
        chat.title = " ".join(title.split())
    if "system" in body:
        system = body["system"]
        if system is not None and (not isinstance(system, str) or len(system) > MAX_SYSTEM_CHARS):
            raise ApiError(f"system must be text of at most {MAX_SYSTEM_CHARS:,} characters, or null",
                           status=400, code="invalid_request", param="system")
        chat.system = system or None
    if "thinking_budget" in body:
        budget = body["thinking_budget"]
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)
                                   or budget < 0):
            raise ApiError("thinking_budget must be a whole number of tokens (0 or more), or null",
                           status=400, code="invalid_request", param="thinking_budget")
        chat.thinking_budget = budget


async def _json(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError("the body is not JSON", status=400, code="invalid_json") from None


class Chats:
    """The routes over the conversation store, and the model card the page shows."""

    def __init__(self, host: EngineHost, model_id: str, model_info: dict[str, Any],
                 tools: Any = None) -> None:
        self.host = host
        self.tools = tools  # webtools.WebTools: what /web/api/info lists
        self.model_id = model_id
        self.meta = model_info.get("meta", {})
        self.context_limit = int(model_info.get("max_model_len") or 0)
        self.pending: dict[str, Conversation] = {}  # made here, no message yet

    def find(self, chat_id: str) -> Conversation:
        return self.pending.get(chat_id) or load(chat_id)

    def store(self, chat: Conversation) -> None:
        """Save `chat` (or keep it here while it has no message)."""
        if chat.messages:
            self.pending.pop(chat.id, None)
            chat.save()
        else:
            self.pending[chat.id] = chat

    def routes(self) -> list[Route]:
        def guarded(handler: Any) -> Any:
            async def endpoint(request: Request) -> Response:
                try:
                    return await handler(request)
                except ApiError as exc:
                    return refusal(exc)
            return endpoint

        return [Route("/web/api/info", guarded(self.info), methods=["GET"]),
                Route("/web/api/chats", guarded(self.list), methods=["GET"]),
                Route("/web/api/chats", guarded(self.create), methods=["POST"]),
                Route("/web/api/chats/{id}", guarded(self.get), methods=["GET"]),
                Route("/web/api/chats/{id}", guarded(self.patch), methods=["PATCH"]),
                Route("/web/api/chats/{id}", guarded(self.delete), methods=["DELETE"])]

    async def info(self, _: Request) -> Response:
        health = self.host.health()
        engine = self.host.engine
        thinks = bool(engine is not None and engine.info.thinking is not False)
        return JSONResponse({"model": self.model_id, "backend": self.meta.get("backend", ""),
                             "placement": self.meta.get("placement", ""),
                             "context_limit": self.context_limit, "thinks": thinks,
                             "state": health.get("status", self.host.state),
                             "note": str(health.get("error") or ""),
                             "tools": [{"name": t.name, "server": t.server, "safe": t.safe,
                                        "description": t.summary}
                                       for t in (await self.tools.listed() if self.tools else ())]})

    async def list(self, _: Request) -> Response:
        found = [*sorted(self.pending.values(), key=lambda c: c.created, reverse=True),
                 *conversations.list_all()]
        chats = [{"id": c.id, "title": c.display_title, "updated": c.updated or c.created,
                  "messages": len(c.messages)} for c in found]
        return JSONResponse({"chats": chats})

    async def create(self, request: Request) -> Response:
        chat = Conversation(model=self.model_id)
        apply_settings(chat, await _json(request))
        self.store(chat)
        return JSONResponse(chat_json(chat), status_code=201)

    async def get(self, request: Request) -> Response:
        return JSONResponse(chat_json(self.find(request.path_params["id"])))

    async def patch(self, request: Request) -> Response:
        chat = self.find(request.path_params["id"])
        apply_settings(chat, await _json(request))
        self.store(chat)
        return JSONResponse(chat_json(chat))

    async def delete(self, request: Request) -> Response:
        chat_id = request.path_params["id"]
        if self.pending.pop(chat_id, None) is not None:
            return Response(status_code=204)
        chat = load(chat_id)
        held = conversations.hold(chat)
        if not isinstance(held, conversations.Hold):
            where = f" (process {held})" if held else ""
            raise ApiError(f"this chat is open in a terminal chat{where}: close it there first",
                           status=409, code="chat_open")
        try:
            chat.path.unlink(missing_ok=True)
            chat.state_path.unlink(missing_ok=True)
            chat.state_path.with_name(chat.state_path.name + ".json").unlink(missing_ok=True)
        finally:
            held.release(forget=True)
        return Response(status_code=204)
