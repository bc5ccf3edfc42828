"""Ollama's requests: a body validated against its schema (schema.py), then read into the request
model (`ChatRequest`), so the engine answers it as it answers OpenAI's and Anthropic's.

- `/api/chat` `messages`: system, user, assistant (its `thinking` is the turn's reasoning, its
  `tool_calls` the calls, given ids here since Ollama's have none), tool (a result: it answers
  the oldest open call of the assistant turn before it, by `tool_name` when given);
  `images` are refused (a text model). `tools` as OpenAI's function tools.
- `/api/generate`: `prompt` (and `system`) as one user turn; `raw` continues the prompt as it
  is (no template); `template` and `images` are refused, `suffix` too.
- `format`: "json" (any JSON object) or a JSON schema, enforced while sampling; `think`:
  true/false or low/medium/high onto the server's thinking budget table; no `think`: the
  server's default (`serve --think`). `options`: num_predict (-1/-2: no cap), temperature,
  top_p, top_k, min_p, seed, stop, repeat_penalty and the penalties; `num_ctx` and the load
  options change nothing (the model is loaded once, with the plan's context).
- `stream` defaults to true, as Ollama's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pocketchat.engines.types import ChatOptions, Message, ToolCall
from pocketchat.server.protocols.conversation import check_results, with_system
from pocketchat.server.protocols.ollama.schema import COMPONENTS
from pocketchat.server.protocols.validate import Schema, bad, parse_json
from pocketchat.server.request import ChatRequest
from pocketchat.server.thinking import effort_thinking

CHAT = Schema(COMPONENTS, "OllamaChatRequest")
GENERATE = Schema(COMPONENTS, "OllamaGenerateRequest")
SHOW = Schema(COMPONENTS, "OllamaShowRequest")
EFFORTS = {"low": "low", "medium": "medium", "high": "high"}


@dataclass(frozen=True)
class OllamaRequest:
    """A validated `/api/chat` or `/api/generate` request: the chat to answer, or with `raw`
    the prompt continued as it is."""

    chat: ChatRequest
    model: str
    raw: str | None = None  # /api/generate with raw: the prompt, no template
    keep_alive: float | None = None  # seconds to keep the model after it (-1: always); None: unsaid


UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def keep_alive(value: object) -> float | None:
    """Ollama's `keep_alive` in seconds: a number of seconds, or a duration ("5m", "30s",
    "1h", "1h30m"); negative keeps the model loaded; None when not given."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    import re

    parts = re.findall(r"(-?\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise bad(f"'keep_alive' {text!r} is not a duration: give seconds, or e.g. \"5m\", "
                  "\"30s\", \"1h\" (negative: keep the model loaded)", "keep_alive", "invalid_value")
    return sum(float(n) * UNITS[u] for n, u in parts)


def _options(data: dict) -> dict[str, Any]:
    o = data.get("options") or {}
    predict = o.get("num_predict")
    seed = o.get("seed")
    return dict(temperature=o.get("temperature"), top_p=o.get("top_p"), top_k=o.get("top_k"),
                min_p=o.get("min_p"), repeat_penalty=o.get("repeat_penalty"),
                presence_penalty=o.get("presence_penalty"),
                frequency_penalty=o.get("frequency_penalty"),
                max_tokens=predict if predict is not None and predict > 0 else None,
                seed=None if seed is None else seed % 2**32)


def _stops(data: dict) -> tuple[str, ...]:
    stop = (data.get("options") or {}).get("stop")
    return (stop,) if isinstance(stop, str) else tuple(stop or ())


def _format(data: dict) -> dict | None:
    fmt = data.get("format")
    if not fmt:
        return None
    if fmt == "json":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}


def _thinking(data: dict) -> tuple[bool, int | None, str]:
    """(thinking, budget, what the server's default gives: "all", "budget" or "")."""
    think = data.get("think")
    if think is None:
        return True, None, "all"
    if think is True:
        return True, None, "budget"
    if think is False:
        return False, None, ""
    on, budget = effort_thinking(EFFORTS[think])
    return on, budget, ""


def _refuse_images(message: dict, where: str) -> None:
    if message.get("images"):
        raise bad(f"'{where}.images': this server runs a text model and cannot read images; "
                  "send the text only", f"{where}.images", "unsupported_content")


def _messages(items: list[dict]) -> tuple[Message, ...]:
    out: list[Message] = []
    places: list[str] = []
    open_calls: list[ToolCall] = []
    for i, m in enumerate(items):
        where = f"messages[{i}]"
        _refuse_images(m, where)
        role, content = m["role"], m.get("content") or ""
        if role == "assistant":
            calls = tuple(ToolCall(id=f"call_{i}_{k}", name=c["function"]["name"],
                                   arguments=json.dumps(c["function"].get("arguments") or {},
                                                        ensure_ascii=False))
                          for k, c in enumerate(m.get("tool_calls") or ()))
            open_calls = list(calls)
            out.append(Message("assistant", content, tool_calls=calls,
                               reasoning=m.get("thinking") or None))
        elif role == "tool":
            name = m.get("tool_name")
            match = next((c for c in open_calls if name is None or c.name == name), None)
            if match is None:
                raise bad(f"'{where}' is a tool result with no open tool call before it (of "
                          f"{name!r})" if name else f"'{where}' is a tool result with no open tool "
                          "call before it", where, "invalid_value")
            open_calls.remove(match)
            out.append(Message("tool", content, tool_call_id=match.id, name=match.name))
        else:
            out.append(Message(role, content))
        places.append(where)
    if not any(m.role != "system" for m in out):
        raise bad("'messages' must hold at least one user or assistant message", "messages",
                  "invalid_value")
    rest = [m for m in out if m.role != "system"]
    spots = [p for m, p in zip(out, places, strict=True) if m.role != "system"]
    check_results(rest, lambda k: spots[k], "tool result", "tool call")
    return with_system((), out)


def _tools(data: dict) -> tuple[dict, ...]:
    tools = []
    for t in data.get("tools") or ():
        fn = {k: v for k, v in t["function"].items() if k in ("name", "description", "parameters")}
        tools.append({"type": "function", "function": fn})
    return tuple(tools)


def _request(data: dict, messages: tuple[Message, ...], tools: tuple[dict, ...] = ()) -> ChatRequest:
    thinking, budget, from_server = _thinking(data)
    options = ChatOptions(**_options(data), thinking=thinking, thinking_budget=budget,
                          tools=tools, response_format=_format(data))
    stream = data.get("stream")
    return ChatRequest(messages=messages, options=options, model=data.get("model") or None,
                       stream=True if stream is None else bool(stream), stop=_stops(data),
                       thinking_from_server=from_server)


def chat_request(data: dict) -> OllamaRequest:
    """An `/api/chat` request from its JSON object; ApiError (400) names the first bad field."""
    CHAT.check(data)
    return OllamaRequest(_request(data, _messages(data["messages"]), _tools(data)),
                         data.get("model") or "", keep_alive=keep_alive(data.get("keep_alive")))


def generate_request(data: dict) -> OllamaRequest:
    """An `/api/generate` request from its JSON object; ApiError (400) names the field."""
    GENERATE.check(data)
    _refuse_images(data, "request")
    for name, why in (("template", "this server renders prompts with the model's own chat "
                                   "template; send raw: true with the whole prompt instead"),
                      ("suffix", "this server does not fill in the middle")):
        if data.get(name):
            raise bad(f"'{name}' is not supported: {why}", name, "unsupported_parameter")
    prompt = data.get("prompt") or ""
    if data.get("raw"):
        chat = _request({**data, "think": False}, ())
        return OllamaRequest(chat, data.get("model") or "", raw=prompt,
                             keep_alive=keep_alive(data.get("keep_alive")))
    messages = with_system((data.get("system") or "",), (Message("user", prompt),))
    return OllamaRequest(_request(data, messages), data.get("model") or "",
                         keep_alive=keep_alive(data.get("keep_alive")))


def parse_chat(body: bytes) -> OllamaRequest:
    return chat_request(parse_json(body))


def parse_generate(body: bytes) -> OllamaRequest:
    return generate_request(parse_json(body))
