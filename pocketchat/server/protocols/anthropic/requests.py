"""Anthropic's requests: a body validated against its schema (schema.py, published in
/openapi.json), then read into the request model (`ChatRequest`).

- `system` (text or blocks) and any `system` message go in one system turn at the start.
- user content: text blocks are the user's message; each `tool_result` becomes a tool result
  (its text joined; `is_error` says so in it) answering a `tool_use` of the assistant turn
  before; each `document` a file on the user message's `attachments` (files.py: a base64,
  text or content source; `title` its name; `context` and `citations` accepted, and unused:
  the answer carries no citations); url and file sources, images and search results are
  refused (a text model, offline).
- assistant content: text, `tool_use` (its `input` written as the JSON arguments), `thinking`
  (its text, or the thought sealed in its `signature` when the text was omitted) as the
  turn's reasoning; a trailing assistant message is a prefill.
- `tools`: custom tools as functions; server tools are left out. `tool_choice`: auto, any
  (a call is forced while sampling), tool (that one), none; `disable_parallel_tool_use`.
- `thinking`: enabled (at most `budget_tokens` of thought) or adaptive (the budget of
  `output_config.effort` in server/thinking.py's table, else the server's default budget)
  turn the model's thinking on, disabled (or none given, as Anthropic's default) off.
- `output_config.format` / `output_format` (json_schema): enforced while sampling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pocketchat.documents import Attachment
from pocketchat.engines.types import ChatOptions, Message, ToolCall
from pocketchat.server.protocols.anthropic.schema import COMPONENTS
from pocketchat.server.protocols.conversation import check_results, with_system
from pocketchat.server.protocols.files import from_base64, from_text, not_here
from pocketchat.server.protocols.sealed import damaged, unseal
from pocketchat.server.protocols.validate import Schema, bad, parse_json
from pocketchat.server.request import ChatRequest
from pocketchat.server.thinking import EFFORT_BUDGETS, effort_thinking

MESSAGES = Schema(COMPONENTS, "AnthropicMessagesRequest")
COUNT = Schema(COMPONENTS, "AnthropicCountTokensRequest")
UNSUPPORTED = {"image": "images", "search_result": "search results"}


@dataclass(frozen=True)
class MessagesRequest:
    """A validated Messages request: the engine's request and what the answer's shape needs."""

    chat: ChatRequest
    model: str  # the name the client asked for (echoed back)
    show_thinking: bool = True  # thinking.display "omitted": the thought only in the signature
    left_out: tuple[str, ...] = ()  # server tools left out of the prompt


def _text(blocks: Any, where: str) -> str:
    """Content (a string or blocks) as text: text blocks joined; others refused."""
    if isinstance(blocks, str):
        return blocks
    parts = []
    for i, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            parts.append(block["text"])
        elif kind in UNSUPPORTED:
            raise bad(f"'{where}[{i}]' is {UNSUPPORTED[kind][:-1]}: {UNSUPPORTED[kind]} are not "
                      "supported by this model (it reads text only)", f"{where}[{i}].type",
                      "unsupported_content")
        elif kind == "document":
            raise bad(f"'{where}[{i}]' is a document here: documents go in a user turn's "
                      "content, beside its text", f"{where}[{i}]", "invalid_value")
    return "".join(parts)


def _document(block: dict, where: str) -> Attachment:
    """A `document` block's file (its `title` the name)."""
    source = block["source"]
    name = (block.get("title") or "document").replace("/", "-").replace("\\", "-")
    if source["type"] == "base64":
        return from_base64(source["data"], name, source.get("media_type"), where)
    if source["type"] == "text":
        return from_text(source["data"], name, source.get("media_type"), where)
    content = source["content"]
    text = content if isinstance(content, str) else "\n\n".join(b["text"] for b in content)
    return from_text(text, name, "text/plain", where)


def _user(content: Any, where: str) -> list[tuple[Message, str]]:
    """A user turn: its tool results (each a "tool" message), then its text (if any)."""
    if isinstance(content, str):
        return [(Message("user", content), where)]
    out: list[tuple[Message, str]] = []
    texts: list[dict] = []
    files: list[Attachment] = []
    for i, block in enumerate(content):
        if block["type"] == "document":
            files.append(_document(block, f"{where}[{i}]"))
        elif block["type"] == "tool_result":
            at = f"{where}[{i}]"
            result = _text(block.get("content", ""), f"{at}.content")
            if block.get("is_error"):
                result = f"Error: {result}" if result else "Error"
            out.append((Message("tool", result, tool_call_id=block["tool_use_id"]), at))
        else:
            texts.append(block)
    if texts or files or not out:
        out.append((Message("user", _text(texts, where), attachments=tuple(files)), where))
    return out


def _check_sealed(token: object, where: str) -> None:
    if damaged(token):
        raise bad(f"'{where}' was changed: it is not a thought this server sealed; send the "
                  "block back as it came, or leave it out", where, "invalid_value")


def _assistant(content: Any, where: str) -> Message:
    if isinstance(content, str):
        return Message("assistant", content)
    text: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(content):
        kind = block["type"]
        if kind == "text":
            text.append(block["text"])
        elif kind == "tool_use":
            calls.append(ToolCall(id=block["id"], name=block["name"],
                                  arguments=json.dumps(block["input"], ensure_ascii=False)))
        elif kind == "thinking":
            if not block["thinking"]:
                _check_sealed(block.get("signature"), f"{where}[{i}].signature")
            thought = block["thinking"] or unseal(block.get("signature")) or ""
            thoughts.append(thought)
        elif kind == "redacted_thinking":
            _check_sealed(block["data"], f"{where}[{i}].data")
            thoughts.append(unseal(block["data"]) or "")
        elif kind == "document":
            raise not_here(f"{where}[{i}]", "document")
        elif kind in UNSUPPORTED:
            _text([block], where)  # refused by name
    reasoning = "".join(thoughts)
    return Message("assistant", "".join(text), tool_calls=tuple(calls), reasoning=reasoning or None)


def _conversation(data: dict) -> tuple[Message, ...]:
    system = data.get("system")
    texts = [system] if isinstance(system, str) else [b["text"] for b in system or ()]
    turns: list[tuple[Message, str]] = []
    for i, m in enumerate(data["messages"]):
        where = f"messages[{i}].content"
        if m["role"] == "assistant":
            turns.append((_assistant(m["content"], where), f"messages[{i}]"))
        elif m["role"] == "system":
            turns.append((Message("system", _text(m["content"], where)), f"messages[{i}]"))
        else:
            turns.extend(_user(m["content"], where))
    messages = [t[0] for t in turns]
    places = [t[1] for t in turns if t[0].role != "system"]
    if not any(m.role != "system" for m in messages):
        raise bad("'messages' must hold at least one user or assistant message", "messages",
                  "invalid_value")
    out = with_system(texts, messages)
    rest = out[1:] if out and out[0].role == "system" else out
    check_results(rest, lambda i: places[i], "tool_result", "tool_use")
    return out


def _tools(data: dict) -> tuple[tuple[dict, ...], tuple[str, ...]]:
    """(the custom tools as function tools, the server tools' names left out)."""
    tools: list[dict] = []
    left_out: list[str] = []
    seen: set[str] = set()
    for i, tool in enumerate(data.get("tools") or ()):
        if tool.get("type") not in (None, "custom"):
            left_out.append(tool["name"])
            continue
        if tool["name"] in seen:
            raise bad(f"tools[{i}]: two tools are named {json.dumps(tool['name'])}",
                      f"tools[{i}].name", "invalid_value")
        seen.add(tool["name"])
        function = {"name": tool["name"], "parameters": tool["input_schema"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    return tuple(tools), tuple(left_out)


def _tool_choice(data: dict, tools: tuple[dict, ...]) -> tuple[str | dict, bool]:
    """(the engine's tool_choice, whether parallel calls are allowed)."""
    choice = data.get("tool_choice") or {"type": "auto"}
    parallel = not choice.get("disable_parallel_tool_use", False)
    kind = choice["type"]
    if kind in ("any", "tool") and not tools:
        raise bad(f"'tool_choice' is {json.dumps(kind)} but no custom 'tools' were given",
                  "tool_choice", "invalid_value")
    if kind == "tool":
        names = [t["function"]["name"] for t in tools]
        if choice["name"] not in names:
            raise bad(f"'tool_choice' names the tool {json.dumps(choice['name'])}, which is not "
                      f"among the tools ({', '.join(names)})", "tool_choice.name", "invalid_value")
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    return {"any": "required"}.get(kind, kind), parallel


def _format(data: dict) -> dict | None:
    spec = (data.get("output_config") or {}).get("format") or data.get("output_format")
    if not spec:
        return None
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": spec["schema"],
                                                  "strict": True}}


def _options(data: dict, **sampling: Any) -> tuple[ChatOptions, tuple[str, ...], bool]:
    tools, left_out = _tools(data)
    choice, parallel = _tool_choice(data, tools)
    thinking = data.get("thinking") or {"type": "disabled"}
    on, budget, from_server = _thinking(thinking, (data.get("output_config") or {}).get("effort"))
    options = ChatOptions(thinking=on, thinking_budget=budget, tools=tools, tool_choice=choice,
                          parallel_tool_calls=parallel, response_format=_format(data), **sampling)
    return options, left_out, thinking.get("display") != "omitted", from_server


def _thinking(thinking: dict, effort: str | None) -> tuple[bool, int | None, str]:
    """(on, budget, what the server's default gives) of `thinking`: enabled with its
    `budget_tokens` (0: off), adaptive with `output_config.effort`'s budget (the effort table
    of server/thinking.py) or the server's default budget, disabled (or none given) off."""
    kind = thinking["type"]
    if kind == "disabled":
        return False, None, ""
    if kind == "enabled" and thinking.get("budget_tokens") is not None:
        n = int(thinking["budget_tokens"])
        return n > 0, n or None, ""
    if effort in EFFORT_BUDGETS:
        on, n = effort_thinking(effort)
        return on, n, ""
    return True, None, "budget"


def messages_request(data: dict) -> MessagesRequest:
    """A Messages request from its JSON object; ApiError (400) names the first bad field."""
    MESSAGES.check(data)
    messages = _conversation(data)
    options, left_out, show, from_server = _options(
        data, max_tokens=data["max_tokens"], temperature=data.get("temperature"),
        top_p=data.get("top_p"), top_k=data.get("top_k"))
    stops = tuple(s for s in data.get("stop_sequences") or () if s)
    chat = ChatRequest(messages=messages, options=options, model=data["model"],
                       stream=bool(data.get("stream")), stop=stops,
                       thinking_from_server=from_server)
    return MessagesRequest(chat=chat, model=data["model"], show_thinking=show, left_out=left_out)


def count_request(data: dict) -> MessagesRequest:
    """A count_tokens request (a Messages request without max_tokens)."""
    COUNT.check(data)
    options, left_out, _, _ = _options(data)
    chat = ChatRequest(messages=_conversation(data), options=options, model=data["model"])
    return MessagesRequest(chat=chat, model=data["model"], left_out=left_out)


def parse_messages_request(body: bytes) -> MessagesRequest:
    return messages_request(parse_json(body))


def parse_count_request(body: bytes) -> MessagesRequest:
    return count_request(parse_json(body))
