"""Whether a JSON schema admits any finite value: a schema whose every value would contain
itself (`{"$ref": "#"}`, an object that requires a property of its own type) cannot be
written out, and llguidance would give an empty or endless answer for it. Such a schema is
refused up front, naming the part (`UnsupportedRequest`).

The rule: `true`, a type, an enum or a const admit a value; `false` none; a `$ref` what its
target admits; an object what each required property admits; an array with `minItems` > 0 what
its items admit; `anyOf`/`oneOf` any branch, `allOf` every one. References are solved as a
least fixed point (each starts as admitting nothing), so recursion with a way out (an optional
property, an empty array, a branch) passes and recursion without one does not.
"""

from __future__ import annotations

from typing import Any, Mapping

from pocketchat.errors import UnsupportedRequest

MAX_ROUNDS = 64


def json_pointer(root: Any, ref: str) -> Any:
    """The part of `root` a local `$ref` ("#", "#/$defs/x") names, or None."""
    if not ref.startswith("#"):
        return None
    node = root
    for raw in [p for p in ref[1:].split("/") if p]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def _admits(schema: Any, root: Any, known: dict[str, bool], depth: int = 0) -> bool:
    if depth > 200 or schema is True or not isinstance(schema, Mapping):
        return schema is not False
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if ref not in known:  # a reference to outside the document: llguidance decides
            return True
        if not known[ref]:
            return False
    for key in ("allOf",):
        parts = schema.get(key)
        if isinstance(parts, list) and not all(_admits(p, root, known, depth + 1) for p in parts):
            return False
    for key in ("anyOf", "oneOf"):
        parts = schema.get(key)
        if isinstance(parts, list) and parts and not any(_admits(p, root, known, depth + 1)
                                                         for p in parts):
            return False
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else None
    if kinds is not None and not any(k in ("object", "array") for k in kinds):
        return True  # a scalar type (or null) always has a value
    if kinds is None or "object" in kinds:
        props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        if all(_admits(props.get(name, True), root, known, depth + 1) for name in required):
            return True
        if kinds is not None and "array" not in kinds:
            return False
    if kinds is None or "array" in kinds:
        low = schema.get("minItems", 0)
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        need = [*prefix[: low if isinstance(low, int) else 0]]
        if isinstance(low, int) and low > len(prefix):
            need.append(schema.get("items", True))
        return all(_admits(p, root, known, depth + 1) for p in need)
    return False


def _refs(node: Any, out: set[str]) -> set[str]:
    if isinstance(node, Mapping):
        if isinstance(node.get("$ref"), str):
            out.add(node["$ref"])
        for value in node.values():
            _refs(value, out)
    elif isinstance(node, list):
        for value in node:
            _refs(value, out)
    return out


def check_finite(schema: Any, param: str) -> None:
    """UnsupportedRequest naming `param` when `schema` admits no finite JSON value."""
    refs = {r for r in _refs(schema, set()) if json_pointer(schema, r) is not None}
    known = {r: False for r in refs}
    for _ in range(MAX_ROUNDS):  # least fixed point: a reference admits what its target does
        changed = False
        for r in refs:
            if not known[r] and _admits(json_pointer(schema, r), schema, known):
                known[r] = changed = True
        if not changed:
            break
    if not _admits(schema, schema, known):
        raise UnsupportedRequest(
            f"{param} admits no finite JSON value: it refers to itself with no way out "
            "(a recursive $ref needs an optional property, an empty array or another branch)",
            param=param, hint="Make the recursive part optional.")
