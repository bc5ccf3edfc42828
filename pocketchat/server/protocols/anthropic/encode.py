"""Anthropic's answers: the message body, the stream's events, usage, stop reasons and
errors in the shapes its clients read (schema.py describes the bodies). When the files did
not fit the context, the message (and the stream's message_start and message_delta) carries
pocketchat's `pocketchat` object (files.py): what was retrieved, and from where."""

from __future__ import annotations

import json
import uuid
from typing import Any

from pocketchat.engines.types import Stats, ToolCall
from pocketchat.errors import ApiError
from pocketchat.server.protocols.files import retrieval_field
from pocketchat.server.protocols.validate import said
from pocketchat.server.protocols.sealed import seal

Event = tuple[str, dict[str, Any]]  # (SSE event name, data)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               503: "overloaded_error"}


def error_body(exc: ApiError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}` (the type from the HTTP status)."""
    message = said(exc, "param")
    kind = ERROR_TYPES.get(exc.status, "api_error" if exc.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_event(exc: ApiError) -> Event:
    return "error", error_body(exc)


def usage(stats: Stats) -> dict[str, int]:
    """Anthropic's usage: `input_tokens` the prompt tokens read for this request,
    `cache_read_input_tokens` those reused from the prompt cache (their sum is the prompt)."""
    whole = stats.prompt_length or stats.prompt_tokens
    return {"input_tokens": max(whole - stats.reused_tokens, 0),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": stats.reused_tokens,
            "output_tokens": int(stats.generated_tokens)}


def stop_reason(finish: str | None, matched: str | None) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of an answer."""
    if matched is not None:
        return "stop_sequence", matched
    return {"tool_calls": "tool_use", "length": "max_tokens"}.get(finish or "", "end_turn"), None


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _input(call: ToolCall) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


def thinking_block(thought: str, show: bool) -> dict[str, Any]:
    """A thinking block: the thought (unless omitted) and its signature, which carries it back."""
    return {"type": "thinking", "thinking": thought if show else "", "signature": seal(thought)}


def tool_use_block(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call)}


def message(mid: str, model: str, content: list[dict], stats: Stats | None,
            reason: str | None = None, sequence: str | None = None) -> dict[str, Any]:
    return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence,
            "usage": usage(stats or Stats()), **retrieval_field(stats)}


def message_body(mid: str, model: str, text: str, thought: str, calls: list[ToolCall],
                 stats: Stats, finish: str | None, matched: str | None,
                 show_thinking: bool = True) -> dict[str, Any]:
    """A whole (non-streaming) answer."""
    content: list[dict[str, Any]] = []
    if thought:
        content.append(thinking_block(thought, show_thinking))
    if text:  # never an empty text block: Anthropic refuses one sent back in the next turn
        content.append({"type": "text", "text": text})
    content += [tool_use_block(c) for c in calls]
    reason, sequence = stop_reason(finish, matched)
    return message(mid, model, content, stats, reason, sequence)


class MessageStream:
    """The stream's events for one answer: `start`, then `delta` for each piece (reasoning,
    text, finished tool calls; a block opens when its kind begins and closes when another
    does), then `finish`."""

    def __init__(self, mid: str, model: str, show_thinking: bool = True) -> None:
        self.mid, self.model, self.show = mid, model, show_thinking
        self.index = -1
        self.open: str | None = None  # the kind of the block being written
        self.thought: list[str] = []
        self.started = False

    def start(self, stats: Stats) -> list[Event]:
        self.started = True
        return [("message_start", {"type": "message_start",
                                   "message": message(self.mid, self.model, [], stats)})]

    def ping(self) -> Event:
        return "ping", {"type": "ping"}

    def _close(self) -> list[Event]:
        if self.open is None:
            return []
        events: list[Event] = []
        if self.open == "thinking":
            events.append(self._delta({"type": "signature_delta",
                                       "signature": seal("".join(self.thought))}))
            self.thought = []
        self.open = None
        events.append(("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        return events

    def _open(self, block: dict[str, Any]) -> list[Event]:
        events = self._close()
        self.index += 1
        self.open = block["type"]
        events.append(("content_block_start", {"type": "content_block_start", "index": self.index,
                                               "content_block": block}))
        return events

    def _delta(self, delta: dict[str, Any]) -> Event:
        return "content_block_delta", {"type": "content_block_delta", "index": self.index,
                                       "delta": delta}

    def delta(self, reasoning: str, text: str, calls: tuple[ToolCall, ...]) -> list[Event]:
        events: list[Event] = []
        if reasoning:
            if self.open != "thinking":
                events += self._open({"type": "thinking", "thinking": "", "signature": ""})
            self.thought.append(reasoning)
            if self.show:
                events.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
        if text:
            if self.open != "text":
                events += self._open({"type": "text", "text": ""})
            events.append(self._delta({"type": "text_delta", "text": text}))
        for call in calls:
            events += self._open({"type": "tool_use", "id": call.id, "name": call.name, "input": {}})
            events.append(self._delta({"type": "input_json_delta",
                                       "partial_json": json.dumps(_input(call), ensure_ascii=False)}))
        return events

    def finish(self, stats: Stats, finish: str | None, matched: str | None) -> list[Event]:
        events = self._close()  # no block at all (a call cut by max_tokens): none, not an empty one
        reason, sequence = stop_reason(finish, matched)
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                         "usage": usage(stats), **retrieval_field(stats)}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events
