"""Qwen's XML call format enforces a tool's whole parameters schema, as the JSON format does:
the grammar each format gets is matched by llguidance against exact call
texts over a byte vocabulary (no model), so each keyword is checked both ways: a value that
follows the schema is admitted in both formats, one that breaks it in neither. The same on a
real model is tests/test_xml_schema_table.py."""

from __future__ import annotations

import json

import pytest

from support.bytetok import admits, byte_tokenizer
from support.schematable import NULLABLE_CASES, OTHER_CASES, STRING_CASES
from pocketchat.engines.constrain.grammar import checked_grammar
from pocketchat.engines.constrain.toolcalls import ToolCallParser
from pocketchat.engines.constrain.xmlparams import ecma_to_rust
from pocketchat.engines.types import ChatOptions
from pocketchat.errors import UnsupportedRequest

pytest.importorskip("llguidance")
TOK = byte_tokenizer()


def tool(params: dict, name: str = "t") -> dict:
    return {"type": "function", "function": {"name": name, "parameters": params}}


def grammar(params: dict, fmt: str) -> str:
    return checked_grammar(ChatOptions(tools=(tool(params),), tool_choice="required",
                                       parallel_tool_calls=False), fmt, TOK)


def xml_call(args: dict, raw: set[str], name: str = "t") -> str:
    body = "".join(f"<parameter={k}>\n{_raw(v) if k in raw else json.dumps(v, ensure_ascii=False)}"
                   "\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def _raw(value) -> str:
    return "null" if value is None else value


def json_call(args: dict, name: str = "t") -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def one(schema: dict) -> dict:
    return {"type": "object", "properties": {"p": schema}, "required": ["p"],
            "additionalProperties": False}


@pytest.mark.parametrize("schema,good,bad", STRING_CASES + OTHER_CASES + NULLABLE_CASES,
                         ids=lambda v: json.dumps(v)[:60] if isinstance(v, dict) else None)
def test_each_keyword_is_enforced_in_both_formats(schema, good, bad):
    params = one(schema)
    raw = {"p"} if schema.get("type") == "string" or (schema, good, bad) in NULLABLE_CASES else set()
    xml, js = grammar(params, "xml"), grammar(params, "json")
    for value in good:
        assert admits(xml, xml_call({"p": value}, raw), TOK), ("xml", value)
        assert admits(js, json_call({"p": value}), TOK), ("json", value)
    for value in bad:
        assert not admits(xml, xml_call({"p": value}, raw), TOK), ("xml", value)
        assert not admits(js, json_call({"p": value}), TOK), ("json", value)


def test_a_raw_value_never_holds_a_closing_tag_the_parser_splits_on():
    xml = grammar(one({"type": "string"}), "xml")
    for value in ("a</parameter>b", "a</tool_call>", "</parameter>"):
        assert not admits(xml, xml_call({"p": value}, {"p"}), TOK), value
    for value in ("a<parameter=q>b", "</function>", "<tool_call>", "a\n</paramete"):
        assert admits(xml, xml_call({"p": value}, {"p"}), TOK), value


def test_what_the_grammar_admits_parses_back_to_the_same_arguments():
    params = {"type": "object", "$defs": {"Color": {"type": "string", "enum": ["red", "green"]}},
              "properties": {"text": {"type": "string", "maxLength": 40},
                             "color": {"$ref": "#/$defs/Color"},
                             "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                             "n": {"type": "integer"}},
              "required": ["text", "color", "maybe", "n"]}
    args = {"text": "a\n<parameter=x>\n\"7\"", "color": "green", "maybe": "7", "n": 7}
    text = xml_call(args, {"text", "color", "maybe"})
    assert admits(grammar(params, "xml"), text, TOK)
    parser = ToolCallParser("xml", [tool(params)], forced=True)
    _, calls = parser.feed(text)
    assert [json.loads(c.arguments) for c in calls] == [args]
    nothing = {**args, "maybe": None}
    _, calls = ToolCallParser("xml", [tool(params)], forced=True).feed(
        xml_call(nothing, {"text", "color", "maybe"}))
    assert [json.loads(c.arguments) for c in calls] == [nothing]


def test_parameters_made_of_ref_allof_and_anyof_are_alternative_shapes():
    params = {"$defs": {"A": {"type": "object", "properties": {"a": {"type": "string",
                                                                     "maxLength": 2}},
                              "required": ["a"], "additionalProperties": False},
                        "B": {"type": "object", "properties": {"b": {"type": "integer"}},
                              "required": ["b"], "additionalProperties": False}},
              "anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]}
    xml = grammar(params, "xml")
    assert admits(xml, xml_call({"a": "xy"}, {"a"}), TOK)
    assert admits(xml, xml_call({"b": 3}, set()), TOK)
    assert not admits(xml, xml_call({"a": "xyz"}, {"a"}), TOK)
    assert not admits(xml, xml_call({"a": "x", "b": 3}, {"a"}), TOK)
    merged = {"type": "object", "allOf": [
        {"properties": {"x": {"type": "string", "maxLength": 1}}, "required": ["x"]},
        {"properties": {"y": {"type": "boolean"}}, "required": ["y"]}]}
    xml = grammar(merged, "xml")
    assert admits(xml, xml_call({"x": "a", "y": True}, {"x"}), TOK)
    assert not admits(xml, xml_call({"x": "a"}, {"x"}), TOK)
    referred = {"$defs": {"P": {"type": "object", "properties": {"s": {"type": "string",
                                                                       "pattern": "^z+$"}}}},
                "$ref": "#/$defs/P"}
    xml = grammar(referred, "xml")
    assert admits(xml, xml_call({"s": "zz"}, {"s"}), TOK)
    assert not admits(xml, xml_call({"s": "za"}, {"s"}), TOK)


def test_a_required_parameter_the_properties_leave_out_is_written_too():
    params = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"],
              "additionalProperties": {"type": "boolean"}}
    xml = grammar(params, "xml")
    assert admits(xml, xml_call({"a": 1, "b": True}, set()), TOK)
    assert not admits(xml, xml_call({"a": 1}, set()), TOK)
    assert not admits(xml, xml_call({"a": 1, "b": 2}, set()), TOK)


def test_what_neither_format_can_enforce_is_one_400_naming_the_part():
    for schema in ({"type": "string", "pattern": "(?<=a)b"}, {"type": "string", "format": "color"}):
        for fmt in ("xml", "json"):
            with pytest.raises(UnsupportedRequest) as info:
                grammar(one(schema), fmt)
            assert info.value.param.startswith("tools[0].function.parameters"), info.value.param
    with pytest.raises(UnsupportedRequest) as info:
        grammar({"type": "array"}, "xml")
    assert info.value.param == "tools[0].function.parameters"


def test_ecma_patterns_are_anchored_per_branch():
    assert ecma_to_rust("^a$") == "(?:(?:a))"
    assert ecma_to_rust("a") == "(?:(?s:.*)(?:a)(?s:.*))"
    assert ecma_to_rust("^a|b$") == "(?:(?:a)(?s:.*))|(?:(?s:.*)(?:b))"
    assert ecma_to_rust("^a\\$") == "(?:(?:a\\$)(?s:.*))"
    assert ecma_to_rust("^[\\d[]$") == "(?:(?:[0-9\\[]))"


def test_one_of_is_enforced_as_any_of_in_tools_and_response_formats():
    """Qwen Code's default tools say `oneOf` where the branches overlap; llguidance refuses
    that unless it may read it as `anyOf` (as llama.cpp does): a forced call over them works,
    and what no branch admits is still refused."""
    overlapping = {"oneOf": [{"type": "string"}, {"type": "string", "enum": ["all"]}, {
        "type": "array", "items": {"type": "string"}}]}
    params = one(overlapping)
    xml, js = grammar(params, "xml"), grammar(params, "json")
    for value in ("all", ["a.txt", "b.txt"]):
        assert admits(js, json_call({"p": value}), TOK), value
        assert admits(xml, xml_call({"p": value}, set()), TOK), value
    assert not admits(js, json_call({"p": 7}), TOK)
    fmt = checked_grammar(ChatOptions(response_format={"type": "json_schema", "json_schema": {
        "schema": params}}), "xml", TOK)
    assert admits(fmt, json.dumps({"p": "all"}), TOK) and not admits(fmt, '{"p": 7}', TOK)
