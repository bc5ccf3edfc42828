"""Ollama's response shapes: a chat or generate piece (`done: false`), the last object with the
engine's own figures (`done: true`: `prompt_eval_count` the prompt tokens evaluated for this
request, `eval_count` the tokens generated, durations in nanoseconds), the model's details for
`/api/tags`, `/api/show` and `/api/ps`, and errors as `{"error": "..."}`."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from pocketchat.engines.types import Stats, ToolCall
from pocketchat.errors import ApiError
from pocketchat.server.protocols.validate import said

# The Ollama API version this server speaks (clients check it before using newer fields:
# `think`, `format` schemas, tool calls).
OLLAMA_VERSION = "0.12.6"
NS = 1_000_000_000


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def error_body(exc: ApiError) -> dict[str, Any]:
    """Ollama's error: `{"error": "..."}` (the hint and the field named in the text)."""
    return {"error": said(exc, "field")}


def tool_calls(calls: tuple[ToolCall, ...] | list[ToolCall]) -> list[dict[str, Any]]:
    """Ollama's calls: the arguments as an object, no id."""
    out = []
    for c in calls:
        try:
            args = json.loads(c.arguments) if c.arguments else {}
        except json.JSONDecodeError:
            args = {}
        out.append({"function": {"name": c.name, "arguments": args if isinstance(args, dict) else {}}})
    return out


def piece(model: str, chat: bool, text: str, thinking: str = "",
          calls: tuple[ToolCall, ...] | list[ToolCall] = ()) -> dict[str, Any]:
    """One piece of an answer (`done: false`)."""
    body: dict[str, Any] = {"model": model, "created_at": now()}
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = tool_calls(calls)
        body["message"] = message
    else:
        body["response"] = text
        if thinking:
            body["thinking"] = thinking
    body["done"] = False
    return body


def figures(stats: Stats, finish: str | None, started: float) -> dict[str, Any]:
    """The last object's figures, from the engine's own counters."""
    return {"done": True, "done_reason": "length" if finish == "length" else "stop",
            "total_duration": int((time.perf_counter() - started) * NS), "load_duration": 0,
            "prompt_eval_count": stats.prompt_tokens,
            "prompt_eval_duration": int(stats.prompt_seconds * NS),
            "eval_count": stats.generated_tokens, "eval_duration": int(stats.decode_seconds * NS)}


def details(meta: dict[str, Any]) -> dict[str, Any]:
    return {"parent_model": "", "format": "mlx" if meta.get("backend") == "mlx" else "gguf",
            "family": meta.get("family", ""), "families": [meta["family"]] if meta.get("family") else None,
            "parameter_size": meta.get("parameter_size", ""),
            "quantization_level": meta.get("quantization", "")}


def model_entry(name: str, meta: dict[str, Any], modified: str) -> dict[str, Any]:
    """One model of `/api/tags` (the one this server runs)."""
    return {"name": name, "model": name, "modified_at": modified, "size": meta.get("size", 0),
            "digest": meta.get("digest", ""), "details": details(meta)}
