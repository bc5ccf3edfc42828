"""Parameter schemas with values each admits and refuses, one keyword (or two) at a time: the
table both call formats are checked against (tests/test_xml_params.py with exact texts,
tests/test_xml_schema_table.py by sampling a model)."""

from __future__ import annotations

# (parameter schema, values it admits, values it refuses); string values are raw text in XML.
STRING_CASES = [
    ({"type": "string", "maxLength": 5}, ["", "abcde", "a\nb\"c", "ééééé"], ["abcdef", "éééééé"]),
    ({"type": "string", "minLength": 2, "maxLength": 3}, ["ab", "abc"], ["a", "abcd"]),
    ({"type": "string", "pattern": "^[a-z]+$"}, ["abc"], ["", "ab1", "ABC"]),
    ({"type": "string", "pattern": "[0-9]{3}", "maxLength": 8}, ["x123y", "123"], ["12", "x12y"]),
    ({"type": "string", "pattern": "^a|b$", "maxLength": 5}, ["ax", "xb", "ab"], ["xa", "bx"]),
    ({"type": "string", "pattern": "^\\d{2}/\\d{2}$"}, ["12/34"], ["1234", "12/3", "١٢/٣٤"]),
    ({"type": "string", "pattern": "^[\\w.]+$"}, ["a_b.c"], ["a b", "é"]),
    ({"type": "string", "pattern": "^\\u00e9+$"}, ["éé"], ["e"]),
    ({"type": "string", "enum": ["red", "dark blue"]}, ["red", "dark blue"], ["blue", "re"]),
    ({"type": "string", "const": "on"}, ["on"], ["off"]),
    ({"type": "string", "format": "date"}, ["2024-01-31", "1999-12-01"], ["2024-1-31", "2024-13-01", "x"]),
    ({"type": "string", "format": "time"}, ["10:20:30Z", "23:59:59.5+02:00"], ["10:20", "25:00:00Z"]),
    ({"type": "string", "format": "date-time"}, ["2024-01-31T10:20:30Z"], ["2024-01-31 10:20", "2024-01-31"]),
    ({"type": "string", "format": "email"}, ["a.b@example.com"], ["a@", "@b.c", "a b@c.d"]),
    ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567"]),
    ({"type": "string", "format": "ipv4"}, ["192.168.0.1"], ["256.1.1.1", "1.2.3"]),
    ({"type": "string", "format": "ipv6"}, ["::1", "fe80::1:2", "1:2:3:4:5:6:7:8"], ["1::2::3", ":1"]),
    ({"type": "string", "format": "hostname"}, ["example.com", "a-b.c"], ["-a.com", "a..b"]),
    ({"type": "string", "format": "uri"}, ["https://example.com/a?b=c#d"], ["example", "a b:c"]),
    ({"type": "string", "format": "duration"}, ["P3D", "PT1H30M", "P1W"], ["P", "3D", "PT"]),
    ({"type": "string", "format": "email", "maxLength": 8}, ["a@b.cd"], ["abcd@e.fg"]),
]
OTHER_CASES = [
    ({"type": "integer", "minimum": 1, "maximum": 7}, [1, 7], [0, 8, 1.5]),
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [1, 9], [0, 10]),
    ({"type": "integer", "multipleOf": 5}, [0, 15, -10], [3]),
    ({"type": "number", "minimum": -1.5, "maximum": 2.5}, [-1.5, 0.25, 2], [-2, 3.5]),
    ({"type": "boolean"}, [True, False], ["true", 1]),
    ({"type": "null"}, [None], [0, "null"]),
    ({"type": "array", "items": {"type": "string", "maxLength": 2}, "maxItems": 2},
     [[], ["ab", "c"]], [["abc"], ["a", "b", "c"]]),
    ({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
      "additionalProperties": False}, [{"x": 1}], [{}, {"x": 1, "y": 2}]),
]


# Strings that may be null (Pydantic's Optional[str], OpenAI strict mode's optional fields):
# raw text in XML, where the text `null` is the null.
NULLABLE_CASES = [
    ({"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}], "default": None},
     ["abc", "", None], ["abcd"]),
    ({"type": ["string", "null"], "pattern": "^[a-z]+$"}, ["abc", None], ["ab1", ""]),
]
