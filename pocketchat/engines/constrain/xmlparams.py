"""A tool's parameters schema in Qwen's XML call format, where each parameter is written as
`<parameter=P>\\nVALUE\\n</parameter>\\n`: which parameters a call may write, which of them are
raw text, and what that raw text must be.

- `variants(schema)`: the plain object shapes the parameters admit, as (properties, required)
  pairs in the schema's order. A local `$ref` is followed, `allOf` merged, `anyOf`/`oneOf` give
  one shape per branch; a shape that is not an object cannot be written as parameters
  (`UnsupportedRequest`).
- `raw_text_params(schema)`: the parameters written as raw text, not JSON: those whose schema
  (after a `$ref`) is a string, or a string or null (the text `null` then being the null), the
  same in every shape that has them (`string_or_null`). The grammar writes the others as JSON
  and the parser reads them back as JSON, so both sides agree.
- `raw_text(schema)`: a Lark terminal expression for a string parameter's raw characters, with
  the whole string schema in it: `minLength`/`maxLength` (characters), `pattern` (JSON Schema's
  ECMA regex, unanchored unless it says `^`/`$`, `\\d`/`\\w` ASCII as in JSON), `format` (the
  formats llguidance enforces in JSON), `enum`/`const`; and never a closing tag the parser
  splits on (`</parameter>`, `</tool_call>`), so the value read back is the value written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from pocketchat.engines.constrain.finite import json_pointer
from pocketchat.errors import UnsupportedRequest

# Text a raw value must not contain: the parser ends the value, or the call, at the first one.
CLOSERS = ("</parameter>", "</tool_call>")
MAX_REF_DEPTH = 32
MAX_VARIANTS = 64

_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = "[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"


def _ipv6() -> str:
    """RFC 3986's IPv6address, its nine forms."""
    forms = [rf"(?:{_H16}:){{6}}{_LS32}", rf"::(?:{_H16}:){{5}}{_LS32}",
             rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}"]
    for n, tail in ((1, rf"(?:{_H16}:){{3}}{_LS32}"), (2, rf"(?:{_H16}:){{2}}{_LS32}"),
                    (3, rf"{_H16}:{_LS32}"), (4, _LS32), (5, _H16), (6, "")):
        forms.append(rf"(?:(?:{_H16}:){{0,{n}}}{_H16})?::{tail}")
    return "(?:" + "|".join(forms) + ")"


_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*"
# Days a month has (29 February left out: no leap-year rule in a regex, and stricter is valid).
_DATE = ("[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
         "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_TIME = ("(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
         "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = "(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
_ATEXT = "[A-Za-z0-9!#$%&'*+=?^_`{|}~/-]"
_URI_CHAR = "(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})"

# The string formats llguidance enforces in JSON, as regexes over the raw text (written from
# RFC 3339, 3986, 4122 and 5321; each at most as wide as the format).
FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt]{_TIME}",
    "duration": f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)",
    "email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_HOSTNAME}",
    "hostname": _HOSTNAME,
    "ipv4": _IPV4,
    "ipv6": _ipv6(),
    "uuid": "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
    "uri": f"[A-Za-z][A-Za-z0-9+.-]*:{_URI_CHAR}*(?:#{_URI_CHAR}*)?",
    "unknown": "(?s:.*)",
}
# Extra bounds a format has besides its shape (characters).
FORMAT_LENGTH = {"hostname": 253}


@dataclass(frozen=True)
class Shape:
    """One way to write a call's parameters: each property's schema, in order, and which
    must be written."""
    props: dict[str, Any]
    required: frozenset[str]


def is_string_schema(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    return kind == "string" or (isinstance(kind, list) and kind == ["string"])


def _is_null_schema(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") in ("null", ["null"]) and not (
        set(schema) - {"type", "title", "description"})


def string_or_null(schema: Any, root: Any = None) -> tuple[dict, bool] | None:
    """(its string schema, whether `null` is allowed) for a parameter written as raw text: a
    string, or a string or null (`type: ["string", "null"]`, or `anyOf`/`oneOf` of a string
    and a null: Pydantic's `Optional[str]`), where the raw text `null` is the null; None for
    a parameter written as JSON."""
    schema = resolve(schema, root if root is not None else schema)
    if not isinstance(schema, Mapping):
        return None
    if is_string_schema(schema):
        return dict(schema), False
    kind = schema.get("type")
    if isinstance(kind, list) and sorted(kind) == ["null", "string"]:
        out = {**schema, "type": "string"}
        if isinstance(schema.get("enum"), list):
            out["enum"] = [v for v in schema["enum"] if v is not None]
        return out, True
    for key in ("anyOf", "oneOf"):
        parts = schema.get(key)
        if kind is None and isinstance(parts, list) and len(parts) == 2:
            parts = [resolve(p, root if root is not None else schema) for p in parts]
            strings = [p for p in parts if is_string_schema(p)]
            nulls = [p for p in parts if _is_null_schema(p)]
            if len(strings) == 1 and len(nulls) == 1 and not ({"allOf", "not", "$ref"} & set(schema)):
                siblings = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "default")}
                return {**siblings, **strings[0]}, True
    return None


def resolve(schema: Any, root: Any) -> Any:
    """`schema` with its local `$ref` chain followed (the referring keywords kept on top)."""
    for _ in range(MAX_REF_DEPTH):
        if not isinstance(schema, Mapping) or not isinstance(schema.get("$ref"), str):
            return schema
        target = json_pointer(root, schema["$ref"])
        if not isinstance(target, Mapping):
            return schema
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**target, **siblings}
    return schema


def _merge(a: Shape, b: Shape) -> Shape:
    props = dict(a.props)
    for name, sub in b.props.items():
        props[name] = {"allOf": [props[name], sub]} if name in props else sub
    return Shape(props, a.required | b.required)


def variants(schema: Any, *, root: Any = None, where: str = "parameters",
             depth: int = 0) -> list[Shape]:
    """The object shapes `schema` admits (see the module docstring)."""
    root = schema if root is None else root
    schema = resolve(schema, root)
    if schema is True or schema is None:
        return [Shape({}, frozenset())]
    bad = UnsupportedRequest(f"{where} must describe an object to be written as this model's "
                             "call parameters", param=where)
    if not isinstance(schema, Mapping) or depth > MAX_REF_DEPTH:
        raise bad
    kind = schema.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise bad
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    patterns = schema.get("patternProperties")
    props = {name: _with_patterns(name, sub, patterns) for name, sub in props.items()}
    required = frozenset(r for r in schema.get("required") or () if isinstance(r, str))
    extra = schema.get("additionalProperties", True)
    for name in sorted(required - set(props)):  # required but not declared: what else may be
        if extra is not False:
            props[name] = extra if isinstance(extra, Mapping) else {}
    shapes = [Shape(props, required)]
    for key in ("allOf",):
        for part in schema.get(key) or ():
            subs = variants(part, root=root, where=where, depth=depth + 1)
            shapes = [_merge(s, t) for s in shapes for t in subs]
    for key in ("anyOf", "oneOf"):
        parts = schema.get(key)
        if isinstance(parts, list) and parts:
            branches: list[Shape] = []
            for part in parts:
                branches += variants(part, root=root, where=where, depth=depth + 1)
            shapes = [_merge(s, t) for s in shapes for t in branches]
    if len(shapes) > MAX_VARIANTS:
        raise UnsupportedRequest(f"{where} has more than {MAX_VARIANTS} alternative shapes to "
                                 "be written as this model's call parameters", param=where)
    return shapes


def _with_patterns(name: str, sub: Any, patterns: Any) -> Any:
    """A declared property's schema with the patternProperties its name matches."""
    if not isinstance(patterns, Mapping):
        return sub
    extra = []
    for rx, schema in patterns.items():
        try:
            if re.search(rx, name):
                extra.append(schema)
        except re.error:
            continue
    return {"allOf": [sub, *extra]} if extra else sub


def raw_text_params(schema: Any) -> dict[str, bool]:
    """The parameters whose values are raw text, each with whether the text `null` is a null
    (never raises: a schema the grammar refuses is read with its declared properties)."""
    try:
        shapes = variants(schema)
    except UnsupportedRequest:
        props = schema.get("properties") if isinstance(schema, Mapping) else None
        shapes = [Shape(dict(props) if isinstance(props, Mapping) else {}, frozenset())]
    seen: dict[str, Any] = {}
    for shape in shapes:
        for name, sub in shape.props.items():
            got = string_or_null(sub, schema)
            kind = None if got is None else got[1]
            seen[name] = kind if seen.get(name, kind) == kind else None
    return {name: nullable for name, nullable in seen.items() if nullable is not None}


def known_params(schema: Any) -> set[str]:
    try:
        return {name for shape in variants(schema) for name in shape.props}
    except UnsupportedRequest:
        props = schema.get("properties") if isinstance(schema, Mapping) else None
        return set(props) if isinstance(props, Mapping) else set()


def _escape_regex_slashes(rx: str) -> str:
    """`rx` inside Lark's `/.../`: its slashes escaped, line breaks as escapes."""
    out, i = [], 0
    while i < len(rx):
        c = rx[i]
        if c == "\\" and i + 1 < len(rx):
            out.append(rx[i:i + 2])
            i += 2
            continue
        out.append({"/": "\\/", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, c))
        i += 1
    return "".join(out)


def _split_branches(rx: str) -> list[str]:
    """The top-level alternatives of a regex."""
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(rx):
        c = rx[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(rx[start:i])
            start = i + 1
        i += 1
    parts.append(rx[start:])
    return parts


_CLASS_ESCAPES = {"d": "0-9", "w": "0-9A-Za-z_"}


def ecma_to_rust(pattern: str) -> str:
    """A JSON Schema `pattern` (ECMA 262) as a regex for llguidance's lexer that matches the
    whole text: unanchored ends become `.*`, `\\d`/`\\w` are ASCII, `\\uXXXX` is `\\x{XXXX}`,
    a `[` inside a class is literal."""
    branches = []
    for branch in _split_branches(pattern):
        head = branch.startswith("^")
        body = branch[1:] if head else branch
        tail = body.endswith("$") and not _escaped_at(body, len(body) - 1)
        body = body[:-1] if tail else body
        branches.append(("" if head else "(?s:.*)") + f"(?:{_translate(body)})"
                        + ("" if tail else "(?s:.*)"))
    return "|".join(f"(?:{b})" for b in branches)


def _escaped_at(text: str, at: int) -> bool:
    n, i = 0, at - 1
    while i >= 0 and text[i] == "\\":
        n, i = n + 1, i - 1
    return n % 2 == 1


def _translate(rx: str) -> str:
    out, in_class, i = [], False, 0
    while i < len(rx):
        c = rx[i]
        if c == "\\" and i + 1 < len(rx):
            e = rx[i + 1]
            if e.lower() in _CLASS_ESCAPES:
                inner = _CLASS_ESCAPES[e.lower()]
                negated = e.isupper()
                out.append(f"[^{inner}]" if negated else inner if in_class else f"[{inner}]")
                i += 2
            elif e == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", rx[i + 2:i + 6]):
                out.append("\\x{" + rx[i + 2:i + 6] + "}")
                i += 6
            elif e == "u" and rx[i + 2:i + 3] == "{" and rx.find("}", i + 3) > 0:
                end = rx.find("}", i + 3)
                out.append("\\x{" + rx[i + 3:end] + "}")
                i = end + 1
            else:
                out.append(rx[i:i + 2])
                i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            elif c in "[&~":  # literal in ECMA, set syntax in Rust's classes
                c = "\\" + c
        elif c == "[":
            if rx.startswith("[^]", i):  # anything, in ECMA
                out.append("(?s:.)")
                i += 3
                continue
            in_class = True
            if rx.startswith("[^", i):
                out.append("[^")
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _closer_free() -> str:
    tags = "|".join(_escape_regex_slashes(re.escape(t)) for t in CLOSERS)
    return f"~/(?s:.*(?:{tags}).*)/"


def raw_text(schema: Mapping[str, Any], where: str) -> str:
    """A Lark terminal expression for the raw text of a string parameter (the module
    docstring says what it carries)."""
    parts = [f"({_closer_free()})"]
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in FORMAT_LENGTH:
        high = FORMAT_LENGTH[fmt] if not isinstance(high, int) else min(high, FORMAT_LENGTH[fmt])
    low = low if isinstance(low, int) and low > 0 else 0
    # Always there: characters only (a negation alone admits any bytes after a closing tag).
    parts.append(f"/(?s:.{{{low},{high if isinstance(high, int) else ''}}})/")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        parts.append(f"/{_escape_regex_slashes(ecma_to_rust(pattern))}/")
    if isinstance(fmt, str):
        if fmt not in FORMATS:
            raise UnsupportedRequest(f"{where}: the string format {fmt!r} cannot be enforced",
                                     param=f"{where}.format")
        parts.append(f"/{_escape_regex_slashes(FORMATS[fmt])}/")
    choices = None
    if "const" in schema:
        choices = [schema["const"]]
    elif isinstance(schema.get("enum"), list):
        choices = schema["enum"]
    if choices is not None:
        texts = [c for c in choices if isinstance(c, str)]
        if not texts:
            raise UnsupportedRequest(f"{where}: a string with no string among its allowed "
                                     "values admits nothing", param=where)
        parts.append("(" + " | ".join(_lit(t) for t in texts) + ")")
    return " & ".join(parts)
