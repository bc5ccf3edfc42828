"""Anthropic's Messages API as JSON Schema (2020-12): the request bodies every request is
validated against, and the responses, as published in `/openapi.json`.

Fields a local server has no use for (`metadata`, `context_management`, `output_config`'s
effort, `service_tier`, `cache_control` on any block, `container`, `mcp_servers`) are accepted
and change nothing; unknown fields are ignored. Server tools (a `type` other than `custom`:
web search, code execution ...) are accepted and left out of the prompt. What a schema cannot
say (a `tool_result` answering a `tool_use` of the turn before it, `tool_choice` naming one of
the tools) is checked in requests.py.

`document` blocks (a user turn's files: base64, text or content sources) are read into the
message's attachments; their `citations` setting is accepted and no citations are produced
(the answer's text blocks carry none); `context` is accepted and not put in the prompt.
"""

from __future__ import annotations

from typing import Any

from pocketchat.server.protocols.files import FILE_NOTE, RETRIEVAL
from pocketchat.server.protocols.openai.schema import FUNCTION_NAME, sse

REF = "#/components/schemas/"
MAX_STOPS = 16


def ref(name: str) -> dict[str, Any]:
    return {"$ref": REF + name}


def _when(kind: str, then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {"type": {"const": kind}}, "required": ["type"]}, "then": then}


TEXT_BLOCK = {"type": "object", "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
              "required": ["type", "text"]}
SYSTEM = {"description": "Text, or text blocks (joined; `cache_control` accepted).",
          "type": ["string", "array"], "items": ref("AnthropicTextBlock")}
BLOCK_TYPES = ["text", "tool_use", "tool_result", "thinking", "redacted_thinking", "image",
               "document", "search_result", "server_tool_use", "web_search_tool_result"]
BLOCK = {
    "type": "object",
    "description": "A content block: text, document (user: a file, see AnthropicDocumentSource; "
                   "`title` its name), tool_use (assistant), tool_result (user), thinking "
                   "or redacted_thinking (assistant: its reasoning, sent back as it came). "
                   "Images are refused: this server runs text models. " + FILE_NOTE,
    "properties": {"type": {"type": "string"}},
    "required": ["type"],
    "allOf": [
        _when("text", {"properties": {"text": {"type": "string"}}, "required": ["text"]}),
        _when("tool_use", {"properties": {"id": {"type": "string", "minLength": 1},
                                          "name": {"type": "string", "minLength": 1},
                                          "input": {"type": "object"}},
                           "required": ["id", "name", "input"]}),
        _when("tool_result", {"properties": {
            "tool_use_id": {"type": "string", "minLength": 1},
            "content": {"type": ["string", "array"], "items": ref("AnthropicBlock")},
            "is_error": {"type": "boolean"}}, "required": ["tool_use_id"]}),
        _when("thinking", {"properties": {"thinking": {"type": "string"},
                                          "signature": {"type": "string"}},
                           "required": ["thinking"]}),
        _when("redacted_thinking", {"properties": {"data": {"type": "string", "minLength": 1}},
                                    "required": ["data"]}),
        _when("document", {"properties": {"source": ref("AnthropicDocumentSource"),
                                          "title": {"type": ["string", "null"]},
                                          "context": {"type": ["string", "null"]},
                                          "citations": {"type": ["object", "null"]}},
                           "required": ["source"]}),
    ],
}
DOCUMENT_SOURCE = {
    "type": "object",
    "description": "A document's file: base64 (`data`, `media_type` e.g. application/pdf), text "
                   "(`data`, text/plain) or content (text blocks, joined). url and file sources "
                   "are refused: this server is offline and has no Files API.",
    "properties": {
        "type": {"enum": ["base64", "text", "content"], "x-code": "unsupported_content",
                 "x-error": "'{param}' is {value}: a document's source here is base64, text or "
                            "content (this server is offline: it fetches no url, and has no "
                            "Files API for a file_id); send the file itself"},
        "media_type": {"type": "string"}, "data": {"type": "string"},
        "content": {"type": ["string", "array"], "items": ref("AnthropicTextBlock")}},
    "required": ["type"],
    "allOf": [_when("base64", {"required": ["data"]}), _when("text", {"required": ["data"]}),
              _when("content", {"required": ["content"]})],
}
MESSAGE = {
    "type": "object",
    "description": "A turn: user (text, tool results) or assistant (text, tool calls, "
                   "thinking). A `system` role here is folded into the system prompt. A "
                   "trailing assistant message is a prefill the answer continues.",
    "properties": {"role": {"enum": ["user", "assistant", "system"]},
                   "content": {"type": ["string", "array"], "items": ref("AnthropicBlock")}},
    "required": ["role", "content"],
}
TOOL = {
    "type": "object",
    "description": "A custom tool (`input_schema`: its arguments' JSON schema), or a server "
                   "tool (any other `type`), which is accepted and left out.",
    "properties": {"type": {"type": ["string", "null"]}, "name": {"type": "string"},
                   "description": {"type": "string"}, "input_schema": {"type": "object"}},
    "required": ["name"],
    "allOf": [{"if": {"anyOf": [{"not": {"required": ["type"]}},
                                {"properties": {"type": {"enum": ["custom", None]}}}]},
               "then": {"properties": {"name": {"type": "string", "pattern": FUNCTION_NAME,
                                                "x-error": "'{param}' must be 1 to 64 letters, "
                                                           "digits, '_', '.', ':' or '-', got {value}"}},
                        "required": ["input_schema"]}}],
}
TOOL_CHOICE = {
    "type": "object",
    "properties": {"type": {"enum": ["auto", "any", "tool", "none"]}, "name": {"type": "string"},
                   "disable_parallel_tool_use": {"type": "boolean"}},
    "required": ["type"],
    "allOf": [_when("tool", {"required": ["name"]})],
}
THINKING = {
    "type": "object",
    "description": "enabled (the thought takes at most budget_tokens, then the answer "
                   "follows; 0: off), adaptive (on: output_config.effort's budget, else the "
                   "server's default), disabled (off; the default). display \"omitted\": thinking "
                   "blocks come back empty, their `signature` still carrying the thought.",
    "properties": {"type": {"enum": ["enabled", "disabled", "adaptive"]},
                   "budget_tokens": {"type": "integer", "minimum": 0},
                   "display": {"type": "string"}},
    "required": ["type"],
}
FORMAT = {"type": "object", "properties": {"type": {"enum": ["json_schema"]},
                                           "schema": {"type": "object"}},
          "required": ["type", "schema"]}
COMMON: dict[str, Any] = {
    "model": {"type": "string", "description": "Any name: this server answers with its model."},
    "messages": {"type": "array", "minItems": 1, "items": ref("AnthropicMessage")},
    "system": SYSTEM,
    "tools": {"type": "array", "items": ref("AnthropicTool")},
    "tool_choice": ref("AnthropicToolChoice"),
    "thinking": ref("AnthropicThinking"),
    "output_config": {"type": "object", "properties": {"format": FORMAT},
                      "description": "`format` (json_schema) is enforced while sampling; "
                                     "`effort` (low, medium, high, max) sets the budget of "
                                     "adaptive thinking (as reasoning_effort's table)."},
    "output_format": FORMAT,
}
REQUEST = {
    "type": "object",
    "description": "Anthropic's Messages request.",
    "properties": {
        **COMMON,
        "max_tokens": {"type": "integer", "minimum": 1},
        "stop_sequences": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_STOPS},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": 0},
        "stream": {"type": "boolean"},
        "metadata": {"type": "object"}, "context_management": {"type": "object"},
        "service_tier": {"type": "string"},
    },
    "required": ["model", "messages", "max_tokens"],
}
COUNT_REQUEST = {"type": "object", "description": "What a Messages request would read.",
                 "properties": COMMON, "required": ["model", "messages"]}

USAGE = {"type": "object", "required": ["input_tokens", "output_tokens"], "properties": {
    "input_tokens": {"type": "integer", "description": "Prompt tokens read for this request."},
    "output_tokens": {"type": "integer"},
    "cache_read_input_tokens": {"type": "integer", "description": "Prompt tokens reused from "
                                                                  "the prompt cache."},
    "cache_creation_input_tokens": {"type": "integer"}}}
RESPONSE = {"type": "object", "required": ["id", "type", "role", "content", "model", "stop_reason",
                                           "usage"],
            "properties": {"id": {"type": "string"}, "type": {"const": "message"},
                           "role": {"const": "assistant"}, "content": {"type": "array"},
                           "model": {"type": "string"},
                           "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence",
                                                    "tool_use", None]},
                           "stop_sequence": {"type": ["string", "null"]}, "usage": ref("AnthropicUsage"),
                           "pocketchat": RETRIEVAL}}
COUNT = {"type": "object", "required": ["input_tokens"],
         "properties": {"input_tokens": {"type": "integer"}}}
ERROR = {"type": "object", "required": ["type", "error"], "properties": {
    "type": {"const": "error"},
    "error": {"type": "object", "required": ["type", "message"],
              "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}

COMPONENTS: dict[str, dict[str, Any]] = {
    "AnthropicMessagesRequest": REQUEST, "AnthropicCountTokensRequest": COUNT_REQUEST,
    "AnthropicMessage": MESSAGE, "AnthropicBlock": BLOCK, "AnthropicTextBlock": TEXT_BLOCK,
    "AnthropicDocumentSource": DOCUMENT_SOURCE,
    "AnthropicTool": TOOL, "AnthropicToolChoice": TOOL_CHOICE, "AnthropicThinking": THINKING,
    "AnthropicMessageResponse": RESPONSE, "AnthropicUsage": USAGE,
    "AnthropicTokenCount": COUNT, "AnthropicError": ERROR,
}
WHY = {400: "The request is invalid (`invalid_request_error`).", 401: "Missing or wrong API key "
       "(`x-api-key` or `Authorization: Bearer`).", 403: "A Host header other than this machine's.",
       413: "The body is over the limit.", 415: "The body is not application/json.",
       429: "The queue is full (see Retry-After).", 500: "The model failed (it is restarted).",
       503: "The model is loading or failed to load, or the server is stopping."}
SSE = sse("with `stream`: "
              "message_start, content_block_start/_delta/_stop, message_delta, "
              "message_stop (and ping while a long prompt is read)")


def _post(summary: str, request: str, response: str, stream: bool) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": ref(response)}, **(SSE if stream else {})}
    return {"post": {
        "summary": summary,
        "parameters": [{"name": "beta", "in": "query", "required": False,
                        "schema": {"type": "string"}, "description": "Accepted (Claude Code sends it)."}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref(request)}}},
        "responses": {"200": {"description": "The answer.", "content": content},
                      **{str(s): {"description": why, "content": {"application/json": {
                          "schema": ref("AnthropicError")}}} for s, why in WHY.items()}},
    }}


PATHS: dict[str, Any] = {
    "/v1/messages": _post("An answer in Anthropic's Messages shape.", "AnthropicMessagesRequest",
                          "AnthropicMessageResponse", True),
    "/v1/messages/count_tokens": _post("The prompt tokens a Messages request would read.",
                                       "AnthropicCountTokensRequest", "AnthropicTokenCount", False),
}
