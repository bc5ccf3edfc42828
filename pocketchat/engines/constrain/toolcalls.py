"""Tool calls in an answer's text: which format a model writes, and a streaming parser for it.

Two formats, chosen from the chat template's source (`call_format`):
- "xml", Qwen3.5/3.6 (and Qwen3-Coder): the template mentions `<function=`; a call is
  `<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`.
  A value is text for a string parameter (`xmlparams.raw_text_params`; for a string-or-null
  one the text `null` is the null) and for one the schema does not know; for the others a
  value that parses as JSON is converted (`7` -> 7, `[1, 2]` -> [1, 2]).
- "json", Hermes / Qwen2.5 / Qwen3 and the fallback for templates without tools:
  `<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>`.

`ToolCallParser` reads the answer text (the reasoning is split off before it, so a call written
while thinking is never taken) as it streams: text before a call is released at once, except
the few characters that may start `<tool_call>`; a call is released when `</tool_call>` closes
it, with an id of its own. A call that does not parse, or that the answer cut off, comes back as
the text it was: the parser never raises.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any, Literal, Mapping, Sequence

from pocketchat.engines.answer.partial import partial_suffix
from pocketchat.engines.constrain.xmlparams import known_params, raw_text_params
from pocketchat.engines.types import ToolCall

CallFormat = Literal["xml", "json"]
OPEN = "<tool_call>"
CLOSE = "</tool_call>"

_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*)</function>\s*", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)


def call_format(template_source: str) -> CallFormat:
    """The call format a model's chat template teaches it ("json" when it names none)."""
    return "xml" if "<function=" in template_source else "json"


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def tool_schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
    """Each tool's parameters schema by function name (OpenAI tool definitions)."""
    out: dict[str, dict] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = dict(params) if isinstance(params, Mapping) else {}
    return out




def parse_xml_call(body: str, schemas: Mapping[str, dict]) -> tuple[str, dict] | None:
    """(name, arguments) of one XML call body (between the tool_call tags), or None."""
    m = _FUNCTION.fullmatch(body)
    if m is None:
        return None
    name, inner = m.group(1).strip(), m.group(2)
    schema = schemas.get(name, {})
    raw, known = raw_text_params(schema), known_params(schema)
    args: dict[str, Any] = {}
    rest = inner
    for p in _PARAMETER.finditer(inner):
        key = p.group(1).strip()
        value = p.group(2)
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        if key in raw:
            args[key] = None if raw[key] and value == "null" else value
        else:
            args[key] = value if key not in known else _json_or_text(value)
        rest = rest.replace(p.group(0), "", 1)
    if rest.strip():  # text that is neither a parameter nor space: not a call we understand
        return None
    return name, args


def _json_or_text(value: str) -> Any:
    """A non-string parameter's value: its JSON, or the text when it is not JSON."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_json_call(body: str) -> tuple[str, dict] | None:
    """(name, arguments) of one JSON call body, or None."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return obj["name"], args


class ToolCallParser:
    """Streaming: `feed(text) -> (text, calls)`, then `flush() -> (text, calls)` at the end.

    Space between calls, and between text and the call after it, is not content.
    """

    def __init__(self, fmt: CallFormat, tools: Sequence[Mapping[str, Any]] = (), *,
                 forced: bool = False) -> None:
        self.format = fmt
        self.forced = forced  # the answer is a call by construction: its text is never content
        self.schemas = tool_schemas(tools)
        self.calls: list[ToolCall] = []  # every call so far
        self._buf = ""  # text held back: a possible start of OPEN, or space
        self._body: list[str] | None = None  # inside a call: its text so far
        self._gap = ""  # the space before the open call (text again if the call is not one)

    def feed(self, text: str) -> tuple[str, tuple[ToolCall, ...]]:
        out: list[str] = []
        calls: list[ToolCall] = []
        text = self._buf + text
        self._buf = ""
        while text:
            if self._body is not None:
                at = text.find(CLOSE)
                if at < 0:
                    keep = partial_suffix(text, (CLOSE,))
                    self._body.append(text[: len(text) - keep])
                    self._buf = text[len(text) - keep:]
                    break
                self._body.append(text[:at])
                body, self._body = "".join(self._body), None
                text = text[at + len(CLOSE):]
                call = self._parse(body)
                if call is None:
                    out.append(self._gap + OPEN + body + CLOSE)
                else:
                    calls.append(call)
                continue
            at = text.find(OPEN)
            if at >= 0:
                before = text[:at]
                kept = before.rstrip()
                if kept:
                    out.append(kept)
                self._gap = before[len(kept):]
                self._body = []
                text = text[at + len(OPEN):]
                continue
            keep = partial_suffix(text, (OPEN,))
            head, tail = text[: len(text) - keep], text[len(text) - keep:]
            stripped = head.rstrip()
            if stripped:
                out.append(stripped)
            self._buf = head[len(stripped):] + tail  # trailing space waits for what follows
            break
        self.calls.extend(calls)
        return "".join(out), tuple(calls)

    def flush(self) -> tuple[str, tuple[ToolCall, ...]]:
        """The end of the answer: a call left open (cut off) comes back as text, unless the
        call was forced (then its markup is no answer: nothing comes back)."""
        if self.forced:  # cut off before the call closed: markup, not an answer
            self._body, self._buf = None, ""
            return "", ()
        if self._body is not None:
            text = self._gap + OPEN + "".join(self._body) + self._buf
            self._body, self._buf = None, ""
            return text, ()
        text, self._buf = self._buf, ""
        return (text if text.strip() else ""), ()

    def _parse(self, body: str) -> ToolCall | None:
        if self.format == "xml":
            got = parse_xml_call(body, self.schemas)
            if got is None and body.strip().startswith("{"):
                got = parse_json_call(body.strip())
        else:
            got = parse_json_call(body.strip())
        if got is None:
            return None
        name, args = got
        return ToolCall(id=new_call_id(), name=name,
                        arguments=json.dumps(args, ensure_ascii=False))
