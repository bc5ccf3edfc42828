"""One validation for every request (fast lane, no model): the published OpenAPI document is
valid and is what requests are checked against; each refusal is a 400 naming the field; what
the engine cannot honour is refused before it runs; the Python API's arguments follow the
same rule."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from pocketchat.api import Session
from pocketchat.engines.constrain.finite import check_finite
from pocketchat.engines.constrain.grammar import check_schema
from pocketchat.engines.constrain.toolcalls import ToolCallParser
from pocketchat.engines.types import ChatOptions, Message, ToolCall
from pocketchat.errors import ApiError, UnsupportedRequest
from pocketchat.server.openapi import document
from pocketchat.server.protocols.openai import schema
from pocketchat.server.protocols.openai.requests import parse_chat_request

HI = [{"role": "user", "content": "hi"}]
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}


def refused(**fields) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse_chat_request(json.dumps({"messages": HI, **fields}).encode())
    assert info.value.status == 400
    return info.value


def test_the_published_document_is_valid_openapi_and_holds_the_checked_schemas():
    doc = document()
    assert doc["openapi"].startswith("3.1")
    for part in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(part)  # each part is a valid JSON Schema
    ops = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert {("/v1/chat/completions", "post"), ("/v1/completions", "post"), ("/v1/models", "get"),
            ("/v1/models/{name}", "get"), ("/health", "get")} <= ops
    body = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    # One source: the document's request schema is the very dict the server checks against.
    assert doc["components"]["schemas"]["ChatCompletionRequest"] is schema.CHAT_REQUEST


@pytest.mark.parametrize("fields, param", [
    ({"max_tokens": -1}, "max_tokens"), ({"max_tokens": "8"}, "max_tokens"),
    ({"temperature": 2.5}, "temperature"), ({"seed": True}, "seed"),
    ({"stop": ["a", 5]}, "stop[1]"), ({"messages": "hello"}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"chat_template_kwargs": {"messages": "x"}}, "chat_template_kwargs.messages"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}},
     "chat_template_kwargs.add_generation_prompt"),
    ({"messages": [*HI, {"role": "tool", "content": "18 C", "tool_call_id": "call_1"}]},
     "messages[1]"),
    ({"messages": [*HI, CALL, {"role": "tool", "content": "x", "tool_call_id": "call_9"}]},
     "messages[2].tool_call_id"),
])
def test_each_refusal_names_its_field(fields, param):
    err = refused(**fields)
    assert err.param == param, err.message
    assert "object at 0x" not in err.message and "<" not in err.message  # no Python repr


def test_nan_and_infinity_are_refused_as_json_does():
    for raw in (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
                b'{"messages": [{"role": "user", "content": "hi"}], "top_p": -Infinity}',
                b'{"messages": [{"role": "user", "content": "hi"}], "top_p": 1e999}'):
        with pytest.raises(ApiError) as info:
            parse_chat_request(raw)
        assert info.value.code == "invalid_json"


def test_a_tool_result_after_its_call_and_a_json_schema_without_schema():
    r = parse_chat_request(json.dumps({"messages": [*HI, CALL, {
        "role": "tool", "content": "18 C", "tool_call_id": "call_1"}]}).encode())
    assert [m.role for m in r.messages] == ["user", "assistant", "tool"]
    rf = {"type": "json_schema", "json_schema": {"name": "x"}}
    options = parse_chat_request(json.dumps({"messages": HI, "response_format": rf}).encode()).options
    from pocketchat.engines.constrain.grammar import response_schema

    assert response_schema(options) == {"type": "object"}  # any JSON object, never plain text


@pytest.mark.parametrize("bad", [
    {"$ref": "#"},
    {"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "required": ["next"],
                                          "properties": {"next": {"$ref": "#/$defs/n"}}}}},
    {"anyOf": [{"$ref": "#"}]},
])
def test_a_schema_with_no_finite_value_is_refused_naming_it(bad):
    with pytest.raises(UnsupportedRequest) as info:
        check_finite(bad, "response_format.json_schema.schema")
    assert info.value.param == "response_format.json_schema.schema"


@pytest.mark.parametrize("good", [
    {"type": "object", "properties": {"next": {"$ref": "#"}}},
    {"$ref": "#/$defs/t", "$defs": {"t": {"type": "object", "required": ["kids"], "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}}},
    {"anyOf": [{"$ref": "#"}, {"type": "string"}]}, {}, True,
])
def test_recursion_with_a_way_out_is_kept(good):
    check_finite(good, "x")


def test_llguidance_errors_keep_their_detail():
    with pytest.raises(UnsupportedRequest) as info:
        check_schema({"type": "string", "pattern": "("}, "response_format.json_schema.schema")
    assert "unclosed group" in info.value.message, info.value.message


def test_a_forced_call_cut_off_is_no_content():
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    forced = ToolCallParser("json", tools, forced=True)
    assert forced.feed("<tool_") == ("", ())
    assert forced.flush() == ("", ())
    forced = ToolCallParser("json", tools, forced=True)
    forced.feed('<tool_call>\n{"name": "get_wea')
    assert forced.flush() == ("", ())
    free = ToolCallParser("json", tools)  # not forced: a cut-off call is text, as before
    free.feed("<tool_call>\n{")
    assert free.flush()[0].startswith("<tool_call>")


@pytest.mark.parametrize("kw, messages, param", [
    ({"max_tokens": -1}, HI, "max_tokens"),
    ({"logprobs": 1000}, HI, "logprobs"),
    ({}, "hello", "messages"),
    ({"thinking": "yes"}, HI, "thinking"),
    ({"temperature": float("nan")}, HI, "temperature"),
    ({"options": ChatOptions(top_p=3)}, HI, "top_p"),
    ({}, [Message("user", 5)], "messages[0].content"),  # type: ignore[arg-type]
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": b"x"}}}]}, HI,
     "tools[0].function.parameters.a"),
    ({}, [Message("tool", "r", tool_call_id="a")], "messages[0]"),
])
def test_the_python_api_refuses_what_the_server_refuses(kw, messages, param):
    options = kw.pop("options", None)
    with pytest.raises(ApiError) as info:
        Session.chat_request(messages, options, **kw)
    assert info.value.param == param, info.value.message


def test_the_python_api_keeps_what_it_was_given():
    msgs = [Message("user", "x"), Message("assistant", "", tool_calls=(ToolCall("a", "f", "{}"),)),
            Message("tool", "r", tool_call_id="a")]
    got, opts = Session.chat_request(msgs, ChatOptions(min_p=0.1, ignore_eos=True), logprobs=3,
                                     thinking=False, max_tokens=5, seed=7)
    assert got == tuple(msgs)
    assert (opts.min_p, opts.ignore_eos, opts.logprobs, opts.thinking, opts.max_tokens, opts.seed) == (
        0.1, True, 3, False, 5, 7)
    prompt, opts = Session.complete_request("The", None, logprobs=2)
    assert prompt == "The" and opts.logprobs == 2 and opts.max_tokens is None  # the plan's length
    with pytest.raises(ApiError):
        Session.complete_request(["a", "b"])
