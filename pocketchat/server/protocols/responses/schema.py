"""OpenAI's Responses API as JSON Schema (2020-12): the request bodies every request is
validated against, and the responses, as published in `/openapi.json`.

Used: `input` (text or items: messages of any role with text parts, a user message's
`input_file` parts (its files: `file_data` base64 or a data: URL; `file_id` and `file_url`
refused: no Files API, offline), `function_call`,
`function_call_output`, `reasoning` with the `encrypted_content` this server gave),
`instructions`, function `tools` (`strict` accepted: calls are always enforced), `tool_choice`,
`parallel_tool_calls`, `reasoning.effort` (`none` turns thinking off, the others set its budget), `text.format`
(`json_schema`, `json_object`), `max_output_tokens`, the sampling fields, `store` and
`previous_response_id`, `include` (`reasoning.encrypted_content`), `stream`. Accepted and
without effect: `prompt_cache_key`, `metadata`, `client_metadata`, `user`, `safety_identifier`,
`service_tier`, `truncation`, `reasoning.summary`, `text.verbosity`. Hosted tools (web search,
file search, ...) and tool namespaces are accepted and left out of the prompt; the response
lists them in `ignored_tools`. Other input item types (a hosted tool's call) are left out.
"""

from __future__ import annotations

from typing import Any

from pocketchat.server.thinking import EFFORTS

from pocketchat.server.protocols.files import FILE_NOTE, RETRIEVAL
from pocketchat.server.protocols.openai.schema import FUNCTION_NAME, sse

REF = "#/components/schemas/"
ROLES = ("system", "developer", "user", "assistant")


def ref(name: str) -> dict[str, Any]:
    return {"$ref": REF + name}


def _when(kind: str, then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {"type": {"const": kind}}, "required": ["type"]}, "then": then}


PART = {"type": "object",
        "description": "A text part (input_text, output_text), or in a user message an "
                       "input_file (`file_data`: base64 or a data: URL; `filename`); images "
                       "are refused: this server runs text models. " + FILE_NOTE,
        "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
        "required": ["type"],
        "allOf": [_when("input_file", {"properties": {
            "file_data": {"type": "string"}, "filename": {"type": ["string", "null"]},
            "file_id": {"type": "null", "x-code": "unsupported_content",
                        "x-error": "'{param}': pocketchat has no Files API; send the file "
                                   "itself as 'file_data' (base64 or a data: URL)"},
            "file_url": {"type": "null", "x-code": "unsupported_content",
                         "x-error": "'{param}': this server is offline and fetches no URL; "
                                    "send the file itself as 'file_data'"}},
            "required": ["file_data"]})]}
ITEM = {
    "type": "object",
    "description": "An input item: a message (`type` may be left out), a function_call, a "
                   "function_call_output, a reasoning item; other types are left out.",
    "properties": {"type": {"type": "string"}},
    "allOf": [
        {"if": {"anyOf": [{"not": {"required": ["type"]}},
                          {"properties": {"type": {"const": "message"}}}]},
         "then": {"properties": {
             "role": {"enum": list(ROLES)},
             "content": {"type": ["string", "array"], "items": ref("ResponsesPart")}},
             "required": ["role", "content"]}},
        _when("function_call", {"properties": {"call_id": {"type": "string"},
                                               "name": {"type": "string"},
                                               "arguments": {"type": "string"}},
                                "required": ["call_id", "name", "arguments"]}),
        _when("function_call_output", {"properties": {
            "call_id": {"type": "string"},
            "output": {"type": ["string", "array"], "items": ref("ResponsesPart")}},
            "required": ["call_id", "output"]}),
        _when("reasoning", {"properties": {"encrypted_content": {"type": ["string", "null"]},
                                           "summary": {"type": "array"},
                                           "content": {"type": ["array", "null"]}}}),
    ],
}
TOOL = {
    "type": "object",
    "description": "A function tool; any other type (web_search, file_search, namespace ...) "
                   "is accepted and left out.",
    "properties": {"type": {"type": "string"}},
    "required": ["type"],
    "allOf": [_when("function", {"properties": {
        "name": {"type": "string", "pattern": FUNCTION_NAME,
                 "x-error": "'{param}' must be 1 to 64 letters, digits, '_', '.', ':' or '-', got {value}"},
        "description": {"type": ["string", "null"]},
        "parameters": {"type": ["object", "null"]}, "strict": {"type": ["boolean", "null"]}},
        "required": ["name"]})],
}
TOOL_CHOICE = {"anyOf": [{"enum": ["none", "auto", "required"]},
                         {"type": "object", "properties": {"type": {"type": "string"},
                                                           "name": {"type": "string"}},
                          "required": ["type"]}],
               "x-error": "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                          "{{\"type\": \"function\", \"name\": NAME}}, got {value}"}
FORMAT = {"type": "object", "properties": {
    "type": {"enum": ["text", "json_object", "json_schema"]}, "name": {"type": "string"},
    "schema": {"type": "object"}, "strict": {"type": ["boolean", "null"]}},
    "required": ["type"], "allOf": [_when("json_schema", {"required": ["schema"]})]}
REQUEST = {
    "type": "object",
    "description": "OpenAI's Responses request.",
    "properties": {
        "model": {"type": "string", "description": "Any name: this server answers with its model."},
        "input": {"type": ["string", "array"], "items": ref("ResponsesItem")},
        "instructions": {"type": ["string", "null"]},
        "tools": {"type": "array", "items": ref("ResponsesTool")},
        "tool_choice": TOOL_CHOICE,
        "parallel_tool_calls": {"type": ["boolean", "null"]},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "stream": {"type": ["boolean", "null"]},
        "store": {"type": ["boolean", "null"]},
        "previous_response_id": {"type": ["string", "null"]},
        "include": {"type": ["array", "null"], "items": {"type": "string"}},
        "reasoning": {"type": ["object", "null"], "properties": {
            "effort": {"enum": [*EFFORTS, None]},
            "summary": {"type": ["string", "null"]}}},
        "text": {"type": ["object", "null"], "properties": {"format": ref("ResponsesFormat")}},
        "prompt_cache_key": {"type": ["string", "null"]},
        "metadata": {"type": ["object", "null"]},
        "client_metadata": {"type": ["object", "null"]},
        "background": {"enum": [False, None], "x-code": "unsupported_parameter",
                       "x-error": "'background' responses are not supported by this server"},
    },
    "required": ["input"],
}
USAGE = {"type": "object", "required": ["input_tokens", "output_tokens", "total_tokens"],
         "properties": {"input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"},
                        "total_tokens": {"type": "integer"},
                        "input_tokens_details": {"type": "object", "properties": {
                            "cached_tokens": {"type": "integer"}}}}}
RESPONSE = {"type": "object", "required": ["id", "object", "status", "output", "model"],
            "properties": {"id": {"type": "string"}, "object": {"const": "response"},
                           "status": {"enum": ["completed", "incomplete", "in_progress", "failed"]},
                           "output": {"type": "array"}, "model": {"type": "string"},
                           "usage": {"anyOf": [ref("ResponsesUsage"), {"type": "null"}]},
                           "ignored_tools": {"type": "array", "items": {"type": "string"}},
                           "pocketchat": RETRIEVAL}}
DELETED = {"type": "object", "required": ["id", "deleted"],
           "properties": {"id": {"type": "string"}, "deleted": {"const": True}}}
ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}

COMPONENTS: dict[str, dict[str, Any]] = {
    "ResponsesRequest": REQUEST, "ResponsesItem": ITEM, "ResponsesPart": PART,
    "ResponsesTool": TOOL, "ResponsesFormat": FORMAT, "Response": RESPONSE,
    "ResponsesUsage": USAGE, "ResponseDeleted": DELETED, "ResponsesError": ERROR,
}
WHY = {400: "The request is invalid; `param` names the field.", 401: "Missing or wrong API key.",
       403: "A Host header other than this machine's.",
       404: "No stored response of that id (`previous_response_id`, or the path's).",
       413: "The body is over the limit.", 415: "The body is not application/json.",
       429: "The queue is full (see Retry-After).", 500: "The model failed (it is restarted).",
       503: "The model is loading or failed to load, or the server is stopping."}
SSE = sse("with `stream`: "
              "response.created ... response.completed (response.incomplete when cut by the cap)")


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): {"description": WHY[s], "content": {"application/json": {
        "schema": ref("ResponsesError")}}} for s in statuses}


ID = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]
PATHS: dict[str, Any] = {
    "/v1/responses": {"post": {
        "summary": "An answer in the Responses shape (stored in RAM unless `store` is false).",
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": ref("ResponsesRequest")}}},
        "responses": {"200": {"description": "The response.", "content": {
            "application/json": {"schema": ref("Response")}, **SSE}},
            **_errors(400, 401, 403, 404, 413, 415, 429, 500, 503)}}},
    "/v1/responses/{id}": {
        "get": {"summary": "A stored response.", "parameters": ID,
                "responses": {"200": {"description": "The response.", "content": {
                    "application/json": {"schema": ref("Response")}}}, **_errors(401, 403, 404)}},
        "delete": {"summary": "Forget a stored response.", "parameters": ID,
                   "responses": {"200": {"description": "Deleted.", "content": {
                       "application/json": {"schema": ref("ResponseDeleted")}}},
                       **_errors(401, 403, 404)}}},
}
