"""The Messages and Responses adapters on their own (fast lane): the wire read into the one
request model (`ChatRequest`: messages, tools, options), refusals naming the field, the
sealed thought, and the bound of the stored responses."""

from __future__ import annotations

import json

import pytest

from pocketchat.engines.types import Message, ToolCall
from pocketchat.errors import ApiError
from pocketchat.server.protocols.anthropic.requests import count_request, messages_request
from pocketchat.server.protocols.responses.requests import check, responses_request
from pocketchat.server.protocols.responses.store import ResponseStore
from pocketchat.server.protocols.sealed import seal, unseal
from support import agentshapes

SCHEMA = {"type": "object", "properties": {"on": {"type": "boolean"}}}


def test_claude_codes_request_becomes_one_system_turn_its_tools_and_thinking_on():
    req = messages_request(agentshapes.claude_code_request())
    chat = req.chat
    assert chat.messages[0] == Message("system", "You are Claude Code, a CLI for coding.\n\n"
                                                 "Be brief. Use the tools to read and edit files.")
    assert chat.messages[1].role == "user" and chat.messages[1].content.endswith("Say hello.")
    assert [t["function"]["name"] for t in chat.options.tools] == list(agentshapes.TOOL_NAMES)
    assert chat.options.thinking and chat.options.max_tokens == 32000 and chat.stream
    assert not req.show_thinking and req.model.startswith("claude-")


def test_a_messages_history_with_calls_results_and_a_sealed_thought():
    data = {"model": "m", "max_tokens": 8, "tools": [
        {"name": "lights", "input_schema": SCHEMA}, {"type": "web_search_20250305", "name": "web_search"}],
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Lights on"},
                     {"role": "assistant", "content": [
                         {"type": "thinking", "thinking": "", "signature": seal("they want light")},
                         {"type": "tool_use", "id": "t1", "name": "lights", "input": {"on": True}}]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": "t1", "content": "failed", "is_error": True},
                         {"type": "text", "text": "Try again"}]},
                     {"role": "system", "content": "Never give up."}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}
    req = messages_request(data)
    assert req.chat.messages == (
        Message("system", "Be brief.\n\nNever give up."), Message("user", "Lights on"),
        Message("assistant", "", tool_calls=(ToolCall("t1", "lights", '{"on": true}'),),
                reasoning="they want light"),
        Message("tool", "Error: failed", tool_call_id="t1"), Message("user", "Try again"))
    assert req.left_out == ("web_search",) and len(req.chat.options.tools) == 1
    assert req.chat.options.tool_choice == "required" and not req.chat.options.parallel_tool_calls
    assert not req.chat.options.thinking  # Anthropic's default


@pytest.mark.parametrize("body, param", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
                                                 "content": "?"}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].type"),
    ({"tools": [{"name": "a", "input_schema": SCHEMA}], "tool_choice": {"type": "tool", "name": "b"}},
     "tool_choice.name"),
    ({"tools": [{"name": "bad name!", "input_schema": SCHEMA}]}, "tools[0].name"),
    ({"thinking": {"type": "sometimes"}}, "thinking.type"),
])
def test_messages_refusals_name_the_field(body, param):
    data = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **body}
    with pytest.raises(ApiError) as info:
        messages_request(data)
    assert info.value.status == 400 and info.value.param == param, info.value.message


def test_count_tokens_needs_no_max_tokens():
    assert count_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).chat.messages


def test_codexs_request_keeps_its_functions_and_leaves_out_the_rest():
    data = agentshapes.codex_request()
    check(data)
    req = responses_request(data)
    chat = req.chat
    assert chat.messages[0].role == "system" and "<permissions>" in chat.messages[0].content
    assert chat.messages[0].content.startswith("You are Codex")
    assert [m.role for m in chat.messages] == ["system", "user", "user"]
    assert [t["function"]["name"] for t in chat.options.tools] == ["shell", "update_plan", "apply_patch"]
    assert req.ignored_tools == ("mcp__docs", "web_search")
    assert not req.store and req.include_encrypted and chat.options.thinking


def test_responses_items_after_a_stored_response():
    earlier = ({"type": "message", "role": "user", "content": "Lights on"},
               {"type": "reasoning", "encrypted_content": seal("they want light")},
               {"type": "function_call", "call_id": "c1", "name": "lights", "arguments": '{"on": true}'})
    data = {"input": [{"type": "function_call_output", "call_id": "c1", "output": "done"}],
            "tools": [{"type": "function", "name": "lights", "parameters": SCHEMA}],
            "reasoning": {"effort": "none"}}
    check(data)
    req = responses_request(data, earlier)
    assert req.chat.messages == (
        Message("user", "Lights on"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "lights", '{"on": true}'),),
                reasoning="they want light"),
        Message("tool", "done", tool_call_id="c1"))
    assert not req.chat.options.thinking and len(req.items) == 4
    with pytest.raises(ApiError) as info:
        responses_request({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]},
                          earlier)
    assert info.value.param == "input[0]"


def test_a_sealed_thought_round_trips_and_anything_else_is_left_out():
    assert unseal(seal("ünïcode thought")) == "ünïcode thought"
    for other in (None, 3, "", "EqVkCkYICBgCKkB", "pc1.%%%", "pc1." + "A" * 8):
        assert unseal(other) is None


def test_the_store_keeps_the_newest_within_its_bound():
    store = ResponseStore(limit=2)
    for i in range(3):
        store.put({"id": f"r{i}"}, ({"role": "user", "content": str(i)},))
    assert store.body("r0") is None and store.items("r2") == ({"role": "user", "content": "2"},)
    assert store.delete("r1") and not store.delete("r1") and len(store) == 1
    small = ResponseStore(max_chars=200)
    small.put({"id": "a"}, ({"content": "x" * 150},))
    small.put({"id": "b"}, ({"content": "y" * 20},))
    assert small.body("a") is None and small.body("b") == {"id": "b"}
    assert json.dumps(small.items("b"))
