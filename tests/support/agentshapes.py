"""The shapes of the first requests Claude Code and Codex send (recorded from
Claude Code 2.1.332 and Codex 0.171.0 pointed at a server on 127.0.0.1), rebuilt at a smaller
size for the tests: every field they carry, the tools' count and nesting, not their text. And
a reader of server-sent events that checks each protocol's event sequence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

# what both agent protocols' tests ask of a model: a tool's arguments, a small JSON answer
ALARM = {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                                          "mode": {"type": "string", "enum": ["beep", "music"]}},
         "required": ["hour", "mode"], "additionalProperties": False}
LIGHTS = {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"],
          "additionalProperties": False}
SMALL = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                          "n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["ok", "n"], "additionalProperties": False}
MODELS = ("starter", "qwen35moe")  # the starter, and a tiny model of POCKET's architecture


def agent_model(kind: str, home: Path) -> str:
    """The model spec for `kind` of `MODELS` (the tiny qwen35moe written under `home`, with
    Qwen3.5's tool template)."""
    if kind == "starter":
        return "starter"
    import pytest

    pytest.importorskip("llama_cpp")
    from support import tinyqwen35

    return str(tinyqwen35.write_tiny_qwen35moe(home / "tiny-qwen35moe.gguf",
                                               chat_template=tinyqwen35.QWEN35_TOOLS_TEMPLATE))


TOOL_NAMES = ("Task", "Bash", "Glob", "Grep", "LS", "Read", "Edit", "MultiEdit", "Write",
              "NotebookEdit", "WebFetch", "TodoWrite")


def big_schema(i: int) -> dict[str, Any]:
    """An input_schema as large and nested as a coding agent's (enums, arrays of objects)."""
    return {
        "type": "object", "$schema": "http://json-schema.org/draft-07/schema#",
        "additionalProperties": False,
        "properties": {
            "path": {"type": "string", "description": f"The absolute path of the file {i} works on"},
            "mode": {"type": "string", "enum": ["read", "write", "append"], "description": "How"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 2000,
                      "description": "The number of lines to read"},
            "edits": {"type": "array", "minItems": 1, "items": {
                "type": "object", "additionalProperties": False,
                "properties": {"old_string": {"type": "string", "description": "Text to replace"},
                               "new_string": {"type": "string", "description": "Its replacement"},
                               "replace_all": {"type": "boolean", "default": False}},
                "required": ["old_string", "new_string"]}},
        },
        "required": ["path"],
    }


def claude_code_request(model: str = "claude-sonnet-4-5-20250929") -> dict[str, Any]:
    """Claude Code's first request: system text blocks with cache_control, 12 tools with
    large input_schemas, adaptive thinking with its text omitted, output_config,
    context_management, metadata, max_tokens 32000, stream."""
    cache = {"type": "ephemeral"}
    return {
        "model": model,
        "max_tokens": 32000,
        "stream": True,
        "system": [{"type": "text", "text": "You are Claude Code, a CLI for coding.",
                    "cache_control": cache},
                   {"type": "text", "text": "Be brief. Use the tools to read and edit files.",
                    "cache_control": cache}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>The project is a Python package."
                                     "</system-reminder>"},
            {"type": "text", "text": "Say hello.", "cache_control": cache}]}],
        "tools": [{"name": name, "description": f"The {name} tool.", "input_schema": big_schema(i)}
                  for i, name in enumerate(TOOL_NAMES)],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "user_0123_account__session_4567"},
    }


def codex_request(model: str = "gpt-5.1-codex") -> dict[str, Any]:
    """Codex's first request: instructions, developer and user input messages, function
    tools, a namespace of tools, hosted web_search, reasoning summary, store false, the
    reasoning's encrypted_content included, prompt_cache_key, client_metadata, stream."""
    function = {"type": "function", "strict": False}
    return {
        "model": model,
        "instructions": "You are Codex, a coding agent running in a terminal.",
        "input": [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<environment_context>cwd=/work</environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
        ],
        "tools": [
            {**function, "name": "shell", "description": "Runs a shell command.",
             "parameters": {"type": "object", "properties": {
                 "command": {"type": "array", "items": {"type": "string"}},
                 "workdir": {"type": "string"}, "timeout_ms": {"type": "number"}},
                 "required": ["command"], "additionalProperties": False}},
            {**function, "name": "update_plan", "description": "Updates the plan.",
             "parameters": {"type": "object", "properties": {"plan": {"type": "array", "items": {
                 "type": "object", "properties": {"step": {"type": "string"},
                                                  "status": {"type": "string"}},
                 "required": ["step", "status"], "additionalProperties": False}}},
                 "required": ["plan"], "additionalProperties": False}},
            {**function, "name": "apply_patch", "description": "Applies a patch.",
             "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                            "required": ["input"], "additionalProperties": False}},
            {"type": "namespace", "name": "mcp__docs", "description": "Tools of an MCP server.",
             "tools": [{**function, "name": "search", "parameters": {
                 "type": "object", "properties": {"q": {"type": "string"}}}}]},
            {"type": "web_search"},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "client_metadata": {"originator": "codex_exec"},
    }


def sse_events(lines: Iterable[str]) -> list[tuple[str | None, Any]]:
    """(event name, data) of each server-sent event (comments skipped)."""
    events: list[tuple[str | None, Any]] = []
    name: str | None = None
    data: list[str] = []
    for line in lines:
        if line.startswith(":"):
            continue
        if not line:
            if data:
                text = "\n".join(data)
                events.append((name, text if text == "[DONE]" else json.loads(text)))
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    return events


def check_anthropic_stream(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """Anthropic's sequence: message_start, pings, blocks (start, deltas of the block's kind,
    stop; indexes 0, 1, ...), message_delta, message_stop; each event's name is its type.
    Returns the message_delta."""
    names = [n for n, _ in events]
    assert all(n == d["type"] for n, d in events), names
    body = [e for e in events if e[0] != "ping"]
    assert body[0][0] == "message_start" and body[-1][0] == "message_stop", names
    assert body[-2][0] == "message_delta", names
    start = body[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and "input_tokens" in start["usage"]
    kinds = {"text": "text_delta", "thinking": ("thinking_delta", "signature_delta"),
             "tool_use": "input_json_delta"}
    index, open_kind = -1, None
    for name, data in body[1:-2]:
        if name == "content_block_start":
            assert open_kind is None and data["index"] == index + 1, names
            index, open_kind = data["index"], data["content_block"]["type"]
        elif name == "content_block_delta":
            assert data["index"] == index and data["delta"]["type"] in kinds[open_kind], data
        elif name == "content_block_stop":
            assert data["index"] == index and open_kind is not None
            open_kind = None
        else:
            raise AssertionError(f"unexpected event {name}: {names}")
    assert open_kind is None and index >= 0, names
    delta = body[-2][1]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence", "tool_use")
    assert delta["usage"]["output_tokens"] >= 0
    return delta


def check_responses_stream(events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """The Responses sequence: response.created, response.in_progress, items (added, their
    deltas, done; output indexes 0, 1, ...), response.completed, or response.incomplete when
the cap cut the answer (as OpenAI ends it); sequence
    numbers 0, 1, ...; each event's name is its type. Returns the final response."""
    names = [n for n, _ in events]
    assert all(n == d["type"] for n, d in events), names
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert names[:2] == ["response.created", "response.in_progress"], names
    final = events[-1][1]["response"]
    ending = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    assert names[-1] == ending, (final["status"], names)
    added = [d["output_index"] for n, d in events if n == "response.output_item.added"]
    done = [d for n, d in events if n == "response.output_item.done"]
    assert added == list(range(len(added))) == [d["output_index"] for d in done], names
    assert final["output"] == [d["item"] for d in done]
    return final
