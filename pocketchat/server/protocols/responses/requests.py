"""The Responses API's requests: a body validated against its schema (schema.py, published in
/openapi.json), then read into the request model (`ChatRequest`).

- `instructions` and every system/developer message go in one system turn at the start.
- `input` items: messages (text parts joined; a user message's `input_file` parts its
  attachments, read by files.py; images refused), `function_call`s
  (the calls of one assistant turn, with the text and reasoning before them),
  `function_call_output`s (tool results answering a call of the turn before), `reasoning`
  (the thought sealed in its `encrypted_content`, else its `reasoning_text`, as the next
  assistant turn's reasoning); items of other types (a hosted tool's call) are left out.
- `previous_response_id`: the stored response's input and output come first.
- `reasoning.effort`: "none" turns thinking off, the others give its budget (the effort
  table of server/thinking.py); none given: the server's default (`serve --think`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable

from pocketchat.documents import Attachment
from pocketchat.engines.types import ChatOptions, Message, ToolCall
from pocketchat.server.protocols.conversation import check_results, with_system
from pocketchat.server.protocols.files import from_base64, not_here
from pocketchat.server.protocols.responses.schema import COMPONENTS
from pocketchat.server.protocols.sealed import damaged, unseal
from pocketchat.server.protocols.validate import Schema, bad, check_strict
from pocketchat.server.request import ChatRequest
from pocketchat.server.thinking import effort_thinking

REQUEST = Schema(COMPONENTS, "ResponsesRequest")
TEXT_PARTS = ("input_text", "output_text", "text", "refusal", "summary_text", "reasoning_text")
ENCRYPTED = "reasoning.encrypted_content"


@dataclass(frozen=True)
class ResponsesRequest:
    """A validated Responses request: the engine's request and what the response echoes."""

    chat: ChatRequest
    data: dict  # the request as sent (the response echoes its settings)
    items: tuple[dict, ...]  # the whole input, stored responses' included (kept with `store`)
    store: bool = True
    include_encrypted: bool = False
    ignored_tools: tuple[str, ...] = ()


def _text(content: Any, where: str, files: bool = False) -> str:
    """Text parts joined (`files`: a user message's, whose input_file parts are its files)."""
    if isinstance(content, str):
        return content
    parts = []
    for i, part in enumerate(content):
        if part["type"] in TEXT_PARTS:
            parts.append(part.get("text") or "")
        elif part["type"] == "input_file" and files:
            continue  # read by `_files`
        elif part["type"] == "input_file":
            raise not_here(f"{where}[{i}]", "file")
        else:
            raise bad(f"'{where}[{i}]' is {json.dumps(part['type'])}: only text parts are "
                      "supported by this model", f"{where}[{i}].type", "unsupported_content")
    return "".join(parts)


def _files(content: Any, where: str) -> tuple[Attachment, ...]:
    """A user message's `input_file` parts, read into attachments."""
    if isinstance(content, str):
        return ()
    return tuple(from_base64(p["file_data"], p.get("filename"), None, f"{where}[{i}]")
                 for i, p in enumerate(content) if p["type"] == "input_file")


def _reasoning(item: dict, where: str) -> str:
    if damaged(item.get("encrypted_content")):
        raise bad(f"'{where}.encrypted_content' was changed: it is not a thought this server "
                  "sealed; send the item back as it came, or leave it out",
                  f"{where}.encrypted_content", "invalid_value")
    sealed = unseal(item.get("encrypted_content"))
    if sealed is not None:
        return sealed
    return "".join(p.get("text") or "" for p in item.get("content") or ()
                   if isinstance(p, dict) and p.get("type") == "reasoning_text")


def conversation(items: tuple[dict, ...], instructions: str | None,
                 where: Callable[[int], str]) -> tuple[Message, ...]:
    """The request model's messages of a whole input (`where(i)` names item i on the wire)."""
    messages: list[Message] = []
    places: list[str] = []
    thought: str | None = None  # a reasoning item waiting for its assistant turn
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        at = where(i)
        if kind == "message":
            role = {"developer": "system"}.get(item["role"], item["role"])
            text = _text(item["content"], f"{at}.content", role == "user")
            if role == "assistant":
                messages.append(Message("assistant", text, reasoning=thought or None))
                thought = None
            else:
                messages.append(Message(role, text,  # type: ignore[arg-type]
                                        attachments=_files(item["content"], f"{at}.content")
                                        if role == "user" else ()))
            places.append(at)
        elif kind == "function_call":
            call = ToolCall(id=item["call_id"], name=item["name"], arguments=item["arguments"])
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and thought is None:
                messages[-1] = replace(last, tool_calls=(*last.tool_calls, call))
            else:
                messages.append(Message("assistant", "", tool_calls=(call,), reasoning=thought or None))
                places.append(at)
                thought = None
        elif kind == "function_call_output":
            messages.append(Message("tool", _text(item["output"], f"{at}.output"),
                                    tool_call_id=item["call_id"]))
            places.append(at)
        elif kind == "reasoning":
            thought = (thought or "") + _reasoning(item, at)
    rest = [m for m in messages if m.role != "system"]
    spots = [p for m, p in zip(messages, places, strict=False) if m.role != "system"]
    if not rest:
        raise bad("'input' must hold at least one user or assistant message", "input", "invalid_value")
    check_results(rest, lambda i: spots[i], "function_call_output", "function_call")
    return with_system([instructions or ""], messages)


def _tools(data: dict) -> tuple[tuple[dict, ...], tuple[str, ...]]:
    tools: list[dict] = []
    ignored: list[str] = []
    seen: set[str] = set()
    for i, tool in enumerate(data.get("tools") or ()):
        if tool["type"] != "function":
            ignored.append(tool.get("name") or tool["type"])
            continue
        if tool["name"] in seen:
            raise bad(f"tools[{i}]: two tools are named {json.dumps(tool['name'])}",
                      f"tools[{i}].name", "invalid_value")
        seen.add(tool["name"])
        if tool.get("strict") is True:
            check_strict(tool.get("parameters") or {"type": "object"}, f"tools[{i}].parameters")
        function = {k: tool[k] for k in ("name", "description", "parameters") if tool.get(k)}
        tools.append({"type": "function", "function": function})
    return tuple(tools), tuple(ignored)


def _tool_choice(value: Any, tools: tuple[dict, ...]) -> str | dict:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value == "required" and not tools:
            raise bad("'tool_choice' is \"required\" but no function 'tools' were given",
                      "tool_choice", "invalid_value")
        return value
    if value["type"] != "function":
        return "auto"  # a hosted tool or allowed_tools: the functions stay on offer
    names = [t["function"]["name"] for t in tools]
    if value.get("name") not in names:
        raise bad(f"'tool_choice' names the function {json.dumps(value.get('name'))}, which is not "
                  f"among the tools ({', '.join(names) or 'none were given'})", "tool_choice.name",
                  "invalid_value")
    return {"type": "function", "function": {"name": value["name"]}}


def _format(data: dict) -> dict | None:
    spec = (data.get("text") or {}).get("format")
    if not spec or spec["type"] == "text":
        return None
    if spec["type"] == "json_object":
        return {"type": "json_object"}
    if spec.get("strict") is True:
        check_strict(spec["schema"], "text.format.schema")
    return {"type": "json_schema", "json_schema": {"name": spec.get("name") or "output",
                                                  "schema": spec["schema"],
                                                  "strict": spec.get("strict")}}


def check(data: dict) -> None:
    """The schema's refusal (a 400 naming the field), before anything else is read."""
    REQUEST.check(data)


def responses_request(data: dict, earlier: tuple[dict, ...] = ()) -> ResponsesRequest:
    """A Responses request (already checked) after the stored input `earlier` (that of its
    previous_response_id); ApiError (400) names the first bad field."""
    given = data["input"]
    new = ({"type": "message", "role": "user", "content": given},) if isinstance(given, str) \
        else tuple(given)
    items = (*earlier, *new)
    offset = len(earlier)
    messages = conversation(items, data.get("instructions"),
                            lambda i: f"input[{i - offset}]" if i >= offset else "previous_response_id")
    tools, ignored = _tools(data)
    effort = (data.get("reasoning") or {}).get("effort")
    thinking, budget = effort_thinking(effort) if effort is not None else (True, None)
    parallel = data.get("parallel_tool_calls")
    options = ChatOptions(
        max_tokens=data.get("max_output_tokens"), temperature=data.get("temperature"),
        top_p=data.get("top_p"), thinking=thinking, thinking_budget=budget, tools=tools,
        tool_choice=_tool_choice(data.get("tool_choice"), tools),
        parallel_tool_calls=True if parallel is None else parallel,
        response_format=_format(data))
    chat = ChatRequest(messages=messages, options=options, model=data.get("model"),
                       stream=bool(data.get("stream")),
                       thinking_from_server="all" if effort is None else "")
    return ResponsesRequest(chat=chat, data=data, items=items,
                            store=data.get("store") is not False,
                            include_encrypted=ENCRYPTED in (data.get("include") or ()),
                            ignored_tools=ignored)
