"""Every schema keyword the JSON call format enforces, the XML format enforces too, on a real
model: the tiny random-weight qwen35moe writes calls in Qwen's XML format
(its Qwen3.5/3.6-like template with tools) and in the JSON format (a Qwen3.6-like template
without tools: the Hermes fallback). Its weights are random, so what makes each call valid is
the mask; each parsed call's arguments are validated with `jsonschema` (formats included,
with checkers for those jsonschema leaves to optional packages)."""

from __future__ import annotations

import datetime
import json
import re
import urllib.parse

import jsonschema
import pytest

from support import tinyqwen35
from support.engine_makers import llama_plan
from support.schematable import NULLABLE_CASES, OTHER_CASES, STRING_CASES
from pocketchat.engines.types import ChatOptions, Message

pytestmark = pytest.mark.slow
ASK = [Message("user", "Call the tool.")]
# Random weights may write the longest value a format allows: a bound keeps each call short.
BOUNDED = {"email", "uri", "hostname", "duration"}

FORMATS = jsonschema.FormatChecker()


def _rfc3339(value: str) -> str:
    """RFC 3339 text as Python's fromisoformat reads it (it wants `T` and `+00:00`, and knows
    no leap second: RFC 3339 allows second 60, llguidance's JSON writes it)."""
    return re.sub(r"(\d\d:\d\d):60", r"\1:59", value.upper().replace("Z", "+00:00"))


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(datetime.datetime.fromisoformat(_rfc3339(value)))


@FORMATS.checks("time", raises=ValueError)
def _time(value: object) -> bool:
    return not isinstance(value, str) or bool(datetime.time.fromisoformat(_rfc3339(value)))


@FORMATS.checks("uri")
def _uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parts = urllib.parse.urlsplit(value)
    return bool(parts.scheme) and not re.search(r"\s", value)


@FORMATS.checks("hostname")
def _hostname(value: object) -> bool:
    return not isinstance(value, str) or (len(value) <= 253 and all(
        re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", label)
        for label in value.split(".")))


def _params(schema: dict) -> dict:
    if schema.get("format") in BOUNDED and "maxLength" not in schema:
        schema = {**schema, "maxLength": 24}
    if schema.get("type") == "string" and not any(k in schema for k in (
            "maxLength", "enum", "const", "format")):
        schema = {**schema, "maxLength": 24}
    return {"type": "object", "properties": {"p": schema, "n": {"type": "integer", "minimum": 0,
                                                                 "maximum": 99}},
            "required": ["p", "n"], "additionalProperties": False}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine

    home = tmp_path_factory.mktemp("xmltable")
    xml = tinyqwen35.write_tiny_qwen35moe(home / "xml.gguf",
                                          chat_template=tinyqwen35.QWEN35_TOOLS_TEMPLATE)
    js = tinyqwen35.write_tiny_qwen35moe(home / "json.gguf",
                                         chat_template=tinyqwen35.QWEN36_TEMPLATE)
    made = {"xml": LlamaCppEngine(llama_plan(2048), xml, name="tiny-xml"),
            "json": LlamaCppEngine(llama_plan(2048), js, name="tiny-json")}
    yield made
    for eng in made.values():
        eng.close()


def test_the_two_templates_teach_the_two_formats(engines):
    tool = {"type": "function", "function": {"name": "t", "parameters": _params({"type": "null"})}}
    assert "<function=NAME>" in engines["xml"].render(ASK, False, options=ChatOptions(tools=(tool,)))
    assert '{"name": "<function name>"' in engines["json"].render(
        ASK, False, options=ChatOptions(tools=(tool,)))


@pytest.mark.parametrize("fmt", ["xml", "json"])
@pytest.mark.parametrize("schema", [case[0] for case in STRING_CASES + OTHER_CASES + NULLABLE_CASES],
                         ids=lambda v: json.dumps(v)[:50])
def test_sampled_calls_follow_the_whole_schema(engines, fmt, schema):
    params = _params(schema)
    tool = {"type": "function", "function": {"name": "record", "parameters": params}}
    for seed in (1, 2):
        chunks = list(engines[fmt].chat(ASK, ChatOptions(
            tools=(tool,), tool_choice="required", parallel_tool_calls=False, thinking=False,
            max_tokens=400, seed=seed, temperature=1.0)))
        calls = [c for chunk in chunks for c in chunk.tool_calls]
        text = "".join(c.text for c in chunks)
        assert chunks[-1].finish_reason == "tool_calls", (fmt, seed, text)
        assert [c.name for c in calls] == ["record"]
        args = json.loads(calls[0].arguments)
        jsonschema.Draft202012Validator(params, format_checker=FORMATS).validate(args)
