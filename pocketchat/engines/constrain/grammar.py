"""What a request constrains, as an llguidance grammar (Lark syntax with inline JSON schemas).

- `response_format` `{"type": "json_object"}`: any JSON object; `{"type": "json_schema",
  "json_schema": {"schema": ...}}`: JSON valid against the schema (enforced whether `strict` is
  set or not: a schema that is given is kept).
- `tool_choice` "required" or a named function (with tools offered): one call (more when
  `parallel_tool_calls`) in the template's call format, its arguments following the tool's
  parameters schema. The JSON format is `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`;
  the XML format writes each parameter as `<parameter=P>\\nVALUE\\n</parameter>\\n` in the
  schema's order (optional ones may be left out), string values as raw text that follows the
  whole string schema (`xmlparams.raw_text`), other values as JSON against their schema; a
  schema made of `$ref`/`allOf`/`anyOf`/`oneOf` gives one alternative per object shape.
- "auto", "none" and no response format: nothing to enforce (None).

`request_grammar(options, fmt)` returns `(grammar, param)` where `param` names the request
part the grammar comes from; `check(grammar, param, tokenizer)` raises `UnsupportedRequest`
naming that part when llguidance cannot compile it (an unsupported keyword, a bad `$ref`, a
regex with look-around): a constraint is never dropped silently.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from pocketchat.errors import UnsupportedRequest
from pocketchat.engines.constrain.finite import check_finite
from pocketchat.engines.constrain.toolcalls import CallFormat
from pocketchat.engines.constrain.xmlparams import raw_text, raw_text_params, string_or_null, variants
from pocketchat.engines.types import ChatOptions

ANY_OBJECT: dict = {"type": "object"}
# Whitespace between JSON tokens: at most this much per gap, so a model that keeps writing
# spaces or newlines (weak or random weights) still has to close the value.
JSON_WHITESPACE = "[ \\n\\r\\t]{0,24}"


def offered_tools(options: ChatOptions) -> tuple[dict, ...]:
    """The tools the model is shown: none when tool_choice is "none"."""
    return () if options.tool_choice == "none" else tuple(options.tools)


def _lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _guided(schema: Mapping[str, Any]) -> dict:
    """The schema with llguidance's options, unless it sets its own: bounded whitespace, and
    `oneOf` read as `anyOf` (exactly one branch is out of reach for a matcher, as llama.cpp
    reads it too: an answer valid for two branches is let through)."""
    schema = dict(schema)
    if "x-guidance" not in schema:
        schema["x-guidance"] = {"whitespace_pattern": JSON_WHITESPACE, "coerce_one_of": True}
    return schema


def _json(schema: Mapping[str, Any]) -> str:
    """`%json {...}` for a schema (`_guided`)."""
    return f"%json {json.dumps(_guided(schema))}"


def _tool_name(tool: Mapping[str, Any]) -> str | None:
    fn = tool.get("function") if isinstance(tool, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    return name if isinstance(name, str) else None


def _params(tool: Mapping[str, Any]) -> dict:
    params = tool["function"].get("parameters")
    return dict(params) if isinstance(params, Mapping) else dict(ANY_OBJECT)


def forced_tools(options: ChatOptions) -> list[tuple[int, dict]] | None:
    """(index, tool) of the tools a call must use, or None when no call is forced."""
    choice = options.tool_choice
    if not options.tools or choice in ("auto", "none"):
        return None
    indexed = [(i, t) for i, t in enumerate(options.tools) if _tool_name(t)]
    if choice == "required":
        if not indexed:
            raise UnsupportedRequest("tool_choice is 'required' but no tool has a function name",
                                     param="tools")
        return indexed
    if isinstance(choice, Mapping):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        picked = [(i, t) for i, t in indexed if _tool_name(t) == name]
        if not picked:
            raise UnsupportedRequest(f"tool_choice names the function {name!r}, which is not "
                                     "among the tools", param="tool_choice")
        return picked[:1]
    raise UnsupportedRequest(f"tool_choice {choice!r} is not one of 'none', 'auto', 'required' "
                             "or a function", param="tool_choice")


def response_schema(options: ChatOptions) -> dict | None:
    """The JSON schema a response_format asks for (None: free text)."""
    rf = options.response_format
    if not rf:
        return None
    kind = rf.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return dict(ANY_OBJECT)
    if kind == "json_schema":
        spec = rf.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if schema is None:
            return dict(ANY_OBJECT)
        if not isinstance(schema, Mapping):
            raise UnsupportedRequest("response_format.json_schema.schema must be a JSON object",
                                     param="response_format.json_schema.schema")
        return dict(schema)
    raise UnsupportedRequest(f"response_format type {kind!r} is not supported; use 'text', "
                             "'json_object' or 'json_schema'", param="response_format.type")


def request_grammar(options: ChatOptions, fmt: CallFormat) -> tuple[str, str] | None:
    """The grammar the answer must follow and the request part it comes from, or None."""
    tools = forced_tools(options)
    if tools is not None:
        return tool_grammar(tools, fmt, parallel=options.parallel_tool_calls), "tools"
    schema = response_schema(options)
    if schema is not None:
        return f"start: {_json(schema)}\n", "response_format.json_schema.schema"
    return None


def tool_grammar(tools: Sequence[tuple[int, dict]], fmt: CallFormat, *, parallel: bool) -> str:
    repeat = ' ("\\n" call)*' if parallel else ""
    if fmt == "json":
        variants = [{"type": "object",
                     "properties": {"name": {"const": t["function"]["name"]},
                                    "arguments": _params(t)},
                     "required": ["name", "arguments"], "additionalProperties": False}
                    for _, t in tools]
        body = variants[0] if len(variants) == 1 else {"anyOf": variants}
        return (f"start: call{repeat}\n"
                f'call: "<tool_call>\\n" body "\\n</tool_call>"\n'
                f"body: {_json(body)}\n")
    lines = [f"start: call{repeat}",
             'call: "<tool_call>\\n" fn "</tool_call>"',
             "fn: " + " | ".join(f"f{k}" for k in range(len(tools)))]
    for k, (i, tool) in enumerate(tools):
        lines += _xml_function(k, i, tool)
    return "\n".join(lines) + "\n"


def _xml_function(k: int, index: int, tool: dict) -> list[str]:
    """The rules of one function in the XML format: one alternative per shape its parameters
    admit (`xmlparams.variants`), each parameter a rule; raw text for the string ones
    (`xmlparams.raw_text`, value and closing tag one terminal), JSON for the others."""
    name = tool["function"]["name"]
    schema = _params(tool)
    where = f"tools[{index}].function.parameters"
    shapes = variants(schema, where=where)
    raw = raw_text_params(schema)
    defs = {key: schema[key] for key in ("$defs", "definitions") if key in schema}
    alternatives, rules = [], []
    for v, shape in enumerate(shapes):
        parts = []
        for j, (pname, pschema) in enumerate(shape.props.items()):
            rule = f"f{k}_v{v}_p{j}"
            parts.append(rule if pname in shape.required else f"{rule}?")
            head = _lit(f"<parameter={pname}>\n")
            if pname in raw:
                string, nullable = string_or_null(pschema, schema) or ({}, False)
                text = raw_text(string, f"{where}.properties.{pname}")
                if nullable:  # the text `null` is the null, never the string
                    text = f'(({text}) & ~"null") | "null"'
                rules.append(f"{rule}: {head} {rule.upper()}")
                rules.append(f'{rule.upper()}: ({text}) "\\n</parameter>\\n"')
            else:
                sub = dict(pschema) if isinstance(pschema, Mapping) else {}
                sub.update(defs)
                rules.append(f'{rule}: {head} {_json(sub)} "\\n</parameter>\\n"')
        alternatives.append(" ".join(parts))
    present = [a for a in alternatives if a]
    body = f"({' | '.join(present)})" if present else ""
    if present and len(present) < len(alternatives):
        body += "?"
    return [f'f{k}: {_lit(f"<function={name}>" + chr(10))} {body} "</function>\\n"', *rules]


def check_schema(schema: dict, param: str, tokenizer: Any = None) -> None:
    from llguidance import LLMatcher

    try:
        grammar = LLMatcher.grammar_from_json_schema(_guided(schema))
    except ValueError as exc:
        raise UnsupportedRequest(f"the JSON schema cannot be used: {exc}", param=param) from exc
    check(grammar, param, tokenizer)


def check(grammar: str, param: str, tokenizer: Any = None) -> None:
    """Raise UnsupportedRequest naming `param` when llguidance cannot compile `grammar` (its
    grammar text, from `LLMatcher.grammar_from_*`)."""
    from llguidance import LLMatcher

    error = LLMatcher.validate_grammar(grammar, tokenizer)
    if error:
        lines = [line.strip() for line in error.splitlines() if line.strip()]
        cut = next((i for i, line in enumerate(lines) if "|" in line), len(lines))
        detail = " ".join(lines[:cut] or lines[:1])  # the error, not the grammar listed after it
        raise UnsupportedRequest(f"{param} cannot be enforced: {detail or 'llguidance refused it'}",
                                 param=param,
                                 hint="Simplify that part of the request (llguidance supports "
                                      "most of JSON Schema; not look-around regexes).")


def checked_grammar(options: ChatOptions, fmt: CallFormat, tokenizer: Any = None) -> str | None:
    """`request_grammar`, compiled once to be sure (llguidance's grammar text), or None."""
    from llguidance import LLMatcher

    tools = forced_tools(options)
    if tools is not None:
        for i, tool in tools:  # name the tool whose schema fails, before the whole grammar
            check_finite(_params(tool), f"tools[{i}].function.parameters")
            check_schema(_params(tool), f"tools[{i}].function.parameters", tokenizer)
    else:
        schema = response_schema(options)
        if schema is not None:
            check_finite(schema, "response_format.json_schema.schema")
    got = request_grammar(options, fmt)
    if got is None:
        return None
    lark, param = got
    grammar = LLMatcher.grammar_from_lark(lark)
    check(grammar, param, tokenizer)
    return grammar
