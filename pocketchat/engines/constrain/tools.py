"""A conversation with tools as a chat template receives it, and the fallback for templates
that know no tools.

`template_messages` turns `Message`s into the dicts chat templates read, the way Hugging Face
templates expect: an assistant turn's `tool_calls` as `{"id", "type": "function", "function":
{"name", "arguments"}}` with the arguments as an OBJECT (Qwen's template iterates them), its
reasoning as `reasoning_content`, a tool result as `{"role": "tool", "content",
"tool_call_id", "name"}`.

A template whose source never mentions `tools` (SmolLM2's ChatML, llama.cpp's built-in
templates, a plain completion) gets the documented fallback instead, in the Hermes format the
JSON parser reads:
- the system prompt gains a section listing the tools (one JSON definition a line inside
  `<tools></tools>`) and how to call them (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`);
- an assistant turn that called tools is its text followed by those calls in that format;
- tool results become a user message, each result wrapped in `<tool_response></tool_response>`
  (consecutive results share one message, so the roles still alternate).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from pocketchat.engines.constrain.toolcalls import CLOSE, OPEN
from pocketchat.engines.types import Message, ToolCall

TOOLS_SECTION = """# Tools

You can call functions to help with the request. Their signatures are inside <tools></tools>:
<tools>
{tools}
</tools>

To call a function, write a JSON object with its name and arguments inside <tool_call></tool_call> tags, one call per tag pair:
<tool_call>
{{"name": "<function name>", "arguments": {{"<parameter>": "<value>"}}}}
</tool_call>"""


def knows_tools(template_source: str) -> bool:
    """Whether a chat template renders tools itself (its source mentions them)."""
    return "tools" in template_source


def call_arguments(call: ToolCall) -> Any:
    """A call's arguments as an object (a template iterates them); the text if not JSON."""
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


def message_dict(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = [{"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": call_arguments(c)}}
                           for c in m.tool_calls]
    if m.reasoning is not None:
        d["reasoning_content"] = m.reasoning
    if m.role == "tool":
        if m.tool_call_id is not None:
            d["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            d["name"] = m.name
    return d


def json_call_text(call: ToolCall) -> str:
    body = json.dumps({"name": call.name, "arguments": call_arguments(call)}, ensure_ascii=False)
    return f"{OPEN}\n{body}\n{CLOSE}"


def tools_section(tools: Sequence[Mapping[str, Any]]) -> str:
    lines = "\n".join(json.dumps(dict(t), ensure_ascii=False) for t in tools)
    return TOOLS_SECTION.format(tools=lines)


def template_messages(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]], *,
                      aware: bool) -> list[dict[str, Any]]:
    """The dicts a template renders; `tools` are the ones offered (none when tool_choice is
    "none"); `aware`: the template renders tools itself, else the fallback is applied."""
    if aware:
        return [message_dict(m) for m in messages]
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            wrapped = f"<tool_response>\n{m.content}\n</tool_response>"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + wrapped
            else:
                out.append({"role": "user", "content": wrapped, "_tool_results": True})
            continue
        content = m.content
        if m.role == "assistant" and m.tool_calls:
            calls = "\n".join(json_call_text(c) for c in m.tool_calls)
            content = f"{content}\n{calls}" if content else calls
        d: dict[str, Any] = {"role": m.role, "content": content}
        if m.reasoning is not None:
            d["reasoning_content"] = m.reasoning
        out.append(d)
    for d in out:
        d.pop("_tool_results", None)
    if tools:
        section = tools_section(tools)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{section}" if out[0]["content"] else section
        else:
            out.insert(0, {"role": "system", "content": section})
    return out
