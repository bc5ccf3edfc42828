"""The Responses API's answers: the response object, its output items, the stream's events,
usage and errors in the shapes its clients read (schema.py describes the bodies). When the
files did not fit the context, the finished response (response.completed's included) carries
pocketchat's `pocketchat` object (files.py): what was retrieved, and from where."""

from __future__ import annotations

import uuid
from typing import Any

from pocketchat.engines.types import Stats, ToolCall
from pocketchat.errors import ApiError
from pocketchat.server.protocols.files import retrieval_field
from pocketchat.server.protocols.openai.encode import error_body
from pocketchat.server.protocols.sealed import seal

Event = tuple[str, dict[str, Any]]  # (SSE event name, data)
ECHOED = ("instructions", "tool_choice", "parallel_tool_calls", "temperature", "top_p",
          "max_output_tokens", "previous_response_id", "reasoning", "text", "metadata",
          "prompt_cache_key")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def error_event(exc: ApiError) -> Event:
    body = error_body(exc)["error"]
    return "error", {"type": "error", "code": body["code"], "message": body["message"],
                     "param": body["param"]}


def usage(stats: Stats) -> dict[str, Any]:
    """`input_tokens` the whole prompt, `cached_tokens` the part reused from the cache,
    `reasoning_tokens` the thought's (the engine's count)."""
    prompt = stats.prompt_length or stats.prompt_tokens
    out = int(stats.generated_tokens)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": stats.reused_tokens},
            "output_tokens": out, "output_tokens_details": {"reasoning_tokens": stats.thinking_tokens},
            "total_tokens": prompt + out}


def reasoning_item(rid: str, thought: str, sealed: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": rid, "summary": [],
                            "content": [{"type": "reasoning_text", "text": thought}]}
    if sealed:
        item["encrypted_content"] = seal(thought)
    return item


def message_item(mid: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"type": "message", "id": mid, "status": status, "role": "assistant",
            "content": content if text or status == "completed" else []}


def call_item(fid: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": fid, "call_id": call.id, "name": call.name,
            "arguments": call.arguments if status == "completed" else "", "status": status}


def as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as the input item that carries it into a later request (the
    reasoning sealed, whatever the request included)."""
    if item["type"] == "reasoning":
        text = "".join(p["text"] for p in item.get("content") or ())
        return {"type": "reasoning", "encrypted_content": seal(text)}
    if item["type"] == "message":
        return {"type": "message", "role": "assistant", "content": item["content"]}
    return {k: item[k] for k in ("type", "call_id", "name", "arguments")}


def response(rid: str, created: int, model: str, data: dict, output: list[dict],
             stats: Stats | None, finish: str | None, ignored: tuple[str, ...],
             store: bool, tools: list) -> dict[str, Any]:
    """The response object (`finish` None: still in progress)."""
    status = "in_progress" if finish is None else "incomplete" if finish == "length" else "completed"
    body: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": created, "status": status, "model": model,
        "output": output, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "tools": tools, "store": store,
        "usage": usage(stats) if stats is not None and finish is not None else None,
        "ignored_tools": list(ignored),
        **{k: data.get(k) for k in ECHOED},
        **retrieval_field(stats if finish is not None else None),
    }
    if body["tool_choice"] is None:
        body["tool_choice"] = "auto"
    if body["parallel_tool_calls"] is None:
        body["parallel_tool_calls"] = True
    if ignored:
        body["notes"] = [f"the tools {', '.join(ignored)} are not run by this local server and "
                         "were left out of the prompt"]
    return body


def output_items(text: str, thought: str, calls: list[ToolCall], sealed: bool) -> list[dict]:
    """A whole answer's output items: reasoning, message, function calls."""
    items: list[dict[str, Any]] = []
    if thought:
        items.append(reasoning_item(new_id("rs"), thought, sealed))
    if text or not calls:
        items.append(message_item(new_id("msg"), text))
    items += [call_item(new_id("fc"), c) for c in calls]
    return items


class ResponseStream:
    """The stream's events for one answer: `start`, `delta` for each piece (an item opens when
    its kind begins and is done when another does), `finish`."""

    def __init__(self, head: dict[str, Any], sealed: bool) -> None:
        self.head = head  # the response object in progress
        self.sealed = sealed
        self.seq = 0
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the item being written
        self.parts: list[str] = []

    def _event(self, kind: str, **fields: Any) -> Event:
        self.seq += 1
        return kind, {"type": kind, "sequence_number": self.seq - 1, **fields}

    def start(self) -> list[Event]:
        return [self._event("response.created", response=self.head),
                self._event("response.in_progress", response=self.head)]

    def _where(self) -> dict[str, Any]:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.output)}

    def _close(self) -> list[Event]:
        item = self.open
        if item is None:
            return []
        text = "".join(self.parts)
        events: list[Event] = []
        if item["type"] == "reasoning":
            done = reasoning_item(item["id"], text, self.sealed)
            events.append(self._event("response.reasoning_text.done", **self._where(),
                                      content_index=0, text=text))
        else:
            done = message_item(item["id"], text)
            part = done["content"][0]
            events += [self._event("response.output_text.done", **self._where(), content_index=0,
                                   text=text, logprobs=[]),
                       self._event("response.content_part.done", **self._where(),
                                   content_index=0, part=part)]
        events.append(self._event("response.output_item.done", output_index=len(self.output),
                                  item=done))
        self.output.append(done)
        self.open, self.parts = None, []
        return events

    def _open(self, item: dict[str, Any]) -> list[Event]:
        events = self._close()
        self.open = item
        events.append(self._event("response.output_item.added", output_index=len(self.output),
                                  item=item))
        if item["type"] == "message":
            events.append(self._event("response.content_part.added", **self._where(),
                                      content_index=0, part={"type": "output_text", "text": "",
                                                             "annotations": [], "logprobs": []}))
        return events

    def delta(self, reasoning: str, text: str, calls: tuple[ToolCall, ...]) -> list[Event]:
        events: list[Event] = []
        if reasoning:
            if self.open is None or self.open["type"] != "reasoning":
                events += self._open({"type": "reasoning", "id": new_id("rs"), "summary": [],
                                      "content": []})
            self.parts.append(reasoning)
            events.append(self._event("response.reasoning_text.delta", **self._where(),
                                      content_index=0, delta=reasoning))
        if text:
            if self.open is None or self.open["type"] != "message":
                events += self._open(message_item(new_id("msg"), "", "in_progress"))
            self.parts.append(text)
            events.append(self._event("response.output_text.delta", **self._where(),
                                      content_index=0, delta=text, logprobs=[]))
        for call in calls:
            events += self._close()
            fid = new_id("fc")
            index = len(self.output)
            events.append(self._event("response.output_item.added", output_index=index,
                                      item=call_item(fid, call, "in_progress")))
            events.append(self._event("response.function_call_arguments.delta", item_id=fid,
                                      output_index=index, delta=call.arguments))
            events.append(self._event("response.function_call_arguments.done", item_id=fid,
                                      output_index=index, arguments=call.arguments, name=call.name))
            done = call_item(fid, call)
            events.append(self._event("response.output_item.done", output_index=index, item=done))
            self.output.append(done)
        return events

    def finish(self, body: dict[str, Any]) -> list[Event]:
        """The last events; `body` the whole response (its output is this stream's)."""
        events = self._close()
        if not self.output:
            events += self._open(message_item(new_id("msg"), "", "in_progress")) + self._close()
        body["output"] = self.output
        # As OpenAI ends a stream: response.incomplete when the cap cut the answer (Codex
        # says "Incomplete response returned, reason: max_output_tokens"), else completed.
        name = "response.incomplete" if body.get("status") == "incomplete" else "response.completed"
        return events + [self._event(name, response=body)]
