"""One message of the web chat answered: POST /web/api/chats/{id}/answer, streamed as
server-sent events and saved into the conversation as it streams (the terminal chat's way).

    {"event": "start", "answer_id", "chat": {"id", "title"}}   the answer's id (end its thought
                                                     by it: POST /v1/chat/completions/{id}/end_thinking)
    {"event": "progress", "done", "total", "seconds_left"}     a long prompt (a file) being read
    {"event": "delta", "content", "reasoning", "live": {...}}  text, and the figures so far
    {"event": "done", "finish_reason", "stats"}                the figures saved with the answer
    {"event": "error", "message"}                              it failed once streaming

`mode` "new" answers `text` (and `files`); "regenerate" answers the last user message again;
"edit" replaces the last user message first. With tool servers (webtools.py) the model may call
tools: `tool_call` and `tool_result` events, then `step` (that answer's figures) before the
model answers again, at most `tools.loop.MAX_STEPS` answers; `tool` names one it must call. Nothing is saved until the engine begins on the
prompt: a refusal (a file that does not fit, a model that is loading) leaves the chat as it was. A
client that goes away (the page's stop) leaves the answer saved so far, marked interrupted.
Reopening a chat loads its saved model state first (conversations/modelstate), and each answer
saves it again, so a chat read here goes on in `pocketchat --continue` without reading it all
again, and the other way round. One answer per chat at a time (a second waits for the first and
its saves); a chat open in a terminal chat is answered as a copy.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable

import anyio

from pocketchat import conversations
from pocketchat.conversations import Conversation, modelstate, stats_summary
from pocketchat.documents import Attachment
from pocketchat.engines.types import ChatOptions, Chunk, Stats
from pocketchat.errors import ApiError
from pocketchat.server.endpoint import Endpoint, Responder, answer_one
from pocketchat.server.host import EngineHost
from pocketchat.server.protocols.files import from_base64
from pocketchat.server.reply import Delta
from pocketchat.server.turn import Turn, chat_run
from pocketchat.server.web.chats import Chats
from pocketchat.server.web.webtools import WebTools
from pocketchat.tools.loop import MAX_STEPS

MODES = ("new", "regenerate", "edit")
MAX_TEXT_CHARS = 400_000
_chat_id: ContextVar[str] = ContextVar("web_chat_id", default="")


@dataclass(frozen=True)
class WebRequest:
    chat_id: str
    text: str
    files: tuple[Attachment, ...]
    mode: str
    tool: str | None = None  # the tool the answer must call (the page's "use a tool")


def parse(body: bytes, chat_id: str) -> WebRequest:
    def bad(message: str, param: str) -> ApiError:
        return ApiError(message, status=400, code="invalid_request", param=param)

    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise ApiError("the body is not JSON", status=400, code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad("send a JSON object", "body")
    text, mode, files = data.get("text", ""), data.get("mode", "new"), data.get("files") or []
    if not isinstance(text, str) or len(text) > MAX_TEXT_CHARS:
        raise bad(f"text must be text of at most {MAX_TEXT_CHARS:,} characters", "text")
    if mode not in MODES:
        raise bad(f"mode must be one of {', '.join(MODES)}", "mode")
    if not isinstance(files, list):
        raise bad("files must be a list of {name, data}", "files")
    read = []
    for i, f in enumerate(files):
        if not isinstance(f, dict) or not isinstance(f.get("data"), str):
            raise bad("each file is {\"name\": ..., \"data\": base64}", f"files[{i}]")
        name = f.get("name") if isinstance(f.get("name"), str) else None
        read.append(from_base64(f["data"], name, None, f"files[{i}]"))
    if mode != "regenerate" and not text.strip() and not read:
        raise bad("write a message or attach a file", "text")
    tool = data.get("tool")
    if tool is not None and (not isinstance(tool, str) or not tool):
        raise bad("tool must be the name of one of the tools (GET /web/api/info lists them)",
                  "tool")
    return WebRequest(chat_id, text, tuple(read), mode, tool)


def prepared(chat: Conversation, request: WebRequest) -> None:
    """`chat` as the answer needs it: the request's message added, or the last one redone."""
    while chat.messages and chat.messages[-1].role != "user":  # the answer to redo
        if request.mode == "new":
            break
        chat.messages.pop()
    if request.mode == "new":
        chat.add("user", request.text, attachments=request.files)
        return
    if not chat.messages or chat.messages[-1].role != "user":
        raise ApiError("this chat has no message to answer again", status=400,
                       code="invalid_request", param="mode")
    if request.mode == "edit":  # the files it had stay unless others are sent
        old = chat.messages.pop()
        chat.add("user", request.text, attachments=request.files or old.attachments)


def live(stats: Stats | None) -> dict[str, Any]:
    if stats is None:
        return {}
    return {"tok_s": round(stats.recent_tok_s or stats.decode_tok_s, 2),
            "thinking_tokens": stats.thinking_tokens, "threads_note": stats.threads_note,
            "context_used": stats.context_used, "context_limit": stats.context_limit}


class WebAnswer(Endpoint):
    """The web chat's answering endpoint (an ASGI app, as every generating endpoint)."""

    def __init__(self, host: EngineHost, model_id: str, chats: Chats, tools: WebTools) -> None:
        super().__init__(host, model_id)
        self.chats = chats
        self.tools = tools
        self._state_of: tuple[int, str] | None = None  # (engine, chat) the live state is
        self._locks: dict[str, asyncio.Lock] = {}  # one answer per chat at a time, saves included

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        token = _chat_id.set(scope.get("path_params", {}).get("id", ""))
        try:
            await super().__call__(scope, receive, send)
        finally:
            _chat_id.reset(token)

    def parse(self, body: bytes) -> WebRequest:
        return parse(body, _chat_id.get())

    def options(self, chat: Conversation) -> ChatOptions:
        if chat.thinking_budget is not None:
            return ChatOptions(thinking=self.thinking.default.on,
                               thinking_budget=chat.thinking_budget)
        return self.thinking.options(ChatOptions(), "all")

    async def answer(self, request: WebRequest, out: Responder) -> None:
        self.chats.find(request.chat_id)  # 404 now, not after the queue
        lock = self._locks.setdefault(request.chat_id, asyncio.Lock())
        async with lock, self.host.turn() as turn:
            chat = self.chats.find(request.chat_id)  # as the answer before this one left it
            held = conversations.hold(chat) if chat.path.exists() else None
            if held is not None and not isinstance(held, conversations.Hold):
                chat = chat.copy()  # open in a terminal: this side goes on as a copy
                held = None
            try:
                await self._answer(chat, request, out, turn)
            finally:
                if isinstance(held, conversations.Hold):
                    held.release()

    async def _answer(self, chat: Conversation, request: WebRequest, out: Responder,
                      turn: Turn) -> None:
        prepared(chat, request)
        answer_id = f"web-{uuid.uuid4().hex[:24]}"
        autosave = conversations.Autosave(chat)
        tools = await self.tools.listed()
        if request.tool is not None and request.tool not in {t.name for t in tools}:
            raise ApiError(f"there is no tool named {request.tool!r} (GET /web/api/info lists "
                           "them)", status=400, code="invalid_request", param="tool")
        started = False
        reply_msg = chat.add("assistant", "", interrupted=True)

        async def begin() -> None:
            nonlocal started
            if started:
                return
            started = True
            if not out.started:
                await out.start_events()
            self.chats.store(chat)
            autosave.flush()
            await out.event({"event": "start", "answer_id": answer_id,
                             "chat": {"id": chat.id, "title": chat.display_title}})

        async def on_progress(chunk: Chunk) -> None:
            await begin()
            p = chunk.progress
            assert p is not None
            left = (p.total - p.done) / p.tok_s if p.tok_s > 0 else None
            await out.event({"event": "progress", "done": p.done, "total": p.total,
                             "seconds_left": round(left, 1) if left is not None else None})

        async def on_delta(d: Delta, _first: bool) -> None:
            await begin()
            reply_msg.content += d.content
            reply_msg.thinking += d.reasoning
            if d.stats is not None:
                reply_msg.stats = stats_summary(d.stats)
            autosave.touch()
            if d.content or d.reasoning:
                await out.event({"event": "delta", "content": d.content,
                                 "reasoning": d.reasoning, "live": live(d.stats)})

        engine = await turn.call(id)
        if self._state_of != (engine, chat.id) and chat.state_path.exists():
            await turn.call(lambda e: modelstate.restore(e, chat))
        self._state_of = (engine, chat.id)
        try:
            for step in range(1, MAX_STEPS + 1):
                options = self.tools.offered(self.options(chat), tools, last=step == MAX_STEPS,
                                             forced=request.tool if step == 1 else None)
                reply = await answer_one(turn, chat_run(chat.engine_messages(), options),
                                         (), on_delta, on_progress, thinking=self.thinking,
                                         key=answer_id)
                await begin()  # an answer of no text still starts its stream
                reply_msg.interrupted = False
                reply_msg.tool_calls = tuple(reply.tool_calls)
                reply_msg.stats = stats_summary(reply.stats) | {
                    "thinking_tokens": reply.stats.thinking_tokens,
                    "thinking_end": reply.stats.thinking_end,
                    "finish_reason": reply.finish_reason}
                autosave.flush()
                if not reply.tool_calls:
                    break
                await self.tools.run_calls(chat, reply.tool_calls, tools, out)
                autosave.flush()
                await out.event({"event": "step", "stats": reply_msg.stats})
                reply_msg = chat.add("assistant", "", interrupted=True)
            await out.event({"event": "done", "finish_reason": reply.finish_reason,
                             "stats": reply_msg.stats})
            await out.end()
        except ApiError as exc:
            if not started:
                raise  # nothing was saved: the chat is as it was
            await out.event({"event": "error", "message": exc.message})
            await out.end()
        finally:
            if started:  # ended, stopped or failed: saved as it is, with the model's state
                with anyio.CancelScope(shield=True):
                    if reply_msg.interrupted:
                        autosave.flush()
                    await turn.call(lambda e: modelstate.save(e, chat))
