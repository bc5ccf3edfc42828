"""A request body checked against its published JSON Schema: the first violation is one 400
(`ApiError`) that names the field as `param` (`messages[0].content`, `tools[1].function.name`)
and says what it must be.

Every protocol validates with this against the schemas it publishes in `/openapi.json`
(openapi.py builds the document from the same dicts), so the check and the document cannot
drift. jsonschema (the reference implementation of JSON Schema 2020-12, the dialect of
OpenAPI 3.1) does the checking; this module turns its errors into a user's message. A part may
carry `x-error` (the message, with `{param}` and `{value}`), `x-code` (the error code) and
`x-param` (the field to name for anything wrong inside it).
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from pocketchat.errors import ApiError

MAX_INT_DIGITS = 100  # longer integers are refused (a float cannot even hold 310 digits)
TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string",
              "boolean": "true or false", "object": "an object", "array": "a list"}


def said(exc: ApiError, param_label: str | None = None) -> str:
    """A refusal's text for the wire: its message, its hint after it, and (for protocols
    whose error has no `param` field) the field named as `(param_label: NAME)`."""
    message = exc.message
    if exc.hint:
        message += ("" if message.endswith((".", "!", "?")) else ".") + " " + exc.hint
    if param_label and exc.param:
        message += f" ({param_label}: {exc.param})"
    return message


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(message, status=400, param=param, code=code)


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise bad(f"the request body has an integer of {digits} digits; at most {MAX_INT_DIGITS} "
                  "are accepted", code="invalid_json")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise bad(f"the request body has the number {text[:40]}, too large for a float",
                  code="invalid_json")
    return value


def _constant(name: str) -> Any:
    raise bad(f"the request body has {name}, which JSON does not allow", code="invalid_json")


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong with it (pathological
    bodies included: nesting deeper than Python's parser goes, integers with huge digit
    counts, NaN and Infinity)."""
    try:
        data = json.loads(body, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except ApiError:
        raise
    except RecursionError:
        raise bad("the request body nests arrays or objects too deeply", code="invalid_json") from None
    except ValueError as exc:  # what json may still raise on a number it cannot convert
        raise bad(f"the request body has a value that cannot be read: {exc}",
                  code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad("the request body must be a JSON object", code="invalid_json")
    return data


def _finite(checker: Any, value: Any) -> bool:
    return Draft202012Validator.TYPE_CHECKER.is_type(value, "number") and math.isfinite(value)


# JSON has no NaN or Infinity: a number is finite (what the Python API passes included).
Validator = validators.extend(
    Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine("number", _finite))


class Schema:
    """One request schema of a set of components (`#/components/schemas/NAME` refs)."""

    def __init__(self, components: Mapping[str, Any], name: str) -> None:
        root = {"$ref": f"#/components/schemas/{name}", "components": {"schemas": dict(components)}}
        self._validator = Validator(root)

    def check(self, data: Any) -> None:
        """ApiError (400) for the first part of `data` that the schema refuses."""
        try:
            error = next(iter(self._validator.iter_errors(data)), None)
        except RecursionError:
            raise bad("the request nests arrays or objects too deeply", code="invalid_json") from None
        if error is not None:
            raise refusal(error)


def param_of(path: Iterable[Any]) -> str:
    """A JSON path as OpenAI names a field: `messages[0].content`, `tools[1].function.name`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def shown(value: Any, limit: int = 60) -> str:
    """A value as JSON, cut short (never a Python repr)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _deepest(error: ValidationError) -> ValidationError:
    """For anyOf/oneOf: the branch the value came closest to (its own type matched and it went
    deepest), else the alternative itself."""
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        return error
    near = [e for e in error.context
            if e.validator not in ("type", "enum", "const", "anyOf", "oneOf")
            or len(e.absolute_path) > len(error.absolute_path)]
    if not near:
        return error
    return _deepest(max(near, key=lambda e: len(e.absolute_path)))


def _own(error: ValidationError, key: str) -> Any:
    """`key` (an x- field) of the failing part or of a part that holds it."""
    at: ValidationError | None = error
    while at is not None:
        if isinstance(at.schema, dict) and key in at.schema:
            return at.schema[key]
        at = at.parent
    return None


def refusal(error: ValidationError) -> ApiError:
    """A jsonschema error as the 400 a user reads."""
    chosen = error if "x-error" in (error.schema if isinstance(error.schema, dict) else {}) \
        else _deepest(error)
    path = list(chosen.absolute_path)
    value = chosen.instance
    if chosen.validator == "required":
        missing = [k for k in chosen.validator_value if isinstance(value, dict) and k not in value]
        field = param_of([*path, missing[0]]) if missing else param_of(path)
        return bad(f"'{field}' is required", field, "invalid_type")  # absent: not of its type
    key = ""
    if chosen.validator == "propertyNames" or _in_property_names(chosen):
        key = chosen.instance if isinstance(chosen.instance, str) else ""
        path = [*path, key] if key else path
    param = _own(chosen, "x-param") or param_of(path) or None
    template = _own(chosen, "x-error")
    code = _own(chosen, "x-code") or ("invalid_type" if chosen.validator == "type"
                                      else "invalid_value")
    if template:
        message = template.format(param=param_of(path) or "the request", value=shown(value),
                                  key=key)
    else:
        message = f"'{param_of(path) or 'the request'}' {_generic(chosen)}"
    return bad(message, param, code)


def _in_property_names(error: ValidationError) -> bool:
    return any(part == "propertyNames" for part in error.relative_schema_path) or (
        error.parent is not None and _in_property_names(error.parent))


def _generic(error: ValidationError) -> str:
    """What the value must be, said plainly."""
    kind, limit, value = error.validator, error.validator_value, error.instance
    if kind == "type":
        kinds = [limit] if isinstance(limit, str) else list(limit)
        words = [TYPE_WORDS.get(k, k) for k in kinds if k != "null"]
        return f"must be {' or '.join(words)}, got {shown(value)}"
    if kind in ("minimum", "exclusiveMinimum"):
        return f"must be at least {limit:g}, got {shown(value)}"
    if kind in ("maximum", "exclusiveMaximum"):
        return f"must be at most {limit:g}, got {shown(value)}"
    if kind == "enum":
        allowed = ", ".join(shown(v) for v in limit if v is not None)
        return f"must be one of {allowed}; got {shown(value)}"
    if kind == "const":
        return f"must be {shown(limit)}, got {shown(value)}"
    if kind == "minItems":
        return f"must have at least {limit} item{'s' if limit != 1 else ''}"
    if kind == "maxItems":
        return f"takes at most {limit} items, got {len(value)}"
    if kind == "maxProperties":
        return f"takes at most {limit} entries, got {len(value)}"
    if kind == "minLength":
        return "must not be empty" if limit == 1 else f"must have at least {limit} characters"
    if kind == "maxLength":
        return f"must have at most {limit} characters"
    if kind == "pattern":
        return f"must match {limit}, got {shown(value)}"
    if kind in ("anyOf", "oneOf"):
        return f"is not one of the accepted forms: {shown(value)}"
    return f"is not valid: {error.message[:200]}"


def check_strict(schema: Any, where: str) -> None:
    """A schema given with `strict: true` follows OpenAI's strict rule this server can check:
    every object in it says `additionalProperties: false` (else a 400 naming the first that
    does not, as OpenAI answers). What strict mode allows is enforced while sampling anyway."""
    for path, node in _objects(schema, where):
        if node.get("additionalProperties") is not False:
            raise bad(f"'{where}' is strict, and strict schemas need 'additionalProperties': "
                      f"false on every object; '{path}' does not say it", path, "invalid_value")


def _objects(node: Any, path: str):
    """(path, schema) of each object schema in `node`, outermost first."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _objects(item, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "object" or (isinstance(node.get("type"), list)
                                        and "object" in node["type"]) or "properties" in node:
        yield path, node
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        for name, sub in (node.get(key) or {}).items() if isinstance(node.get(key), dict) else ():
            yield from _objects(sub, f"{path}.{key}.{name}")
    for key in ("items", "anyOf", "oneOf", "allOf", "prefixItems", "not"):
        if key in node:
            yield from _objects(node[key], f"{path}.{key}")
