"""The server's OpenAPI 3.1 document (GET /openapi.json): every endpoint's request and
response, built from the same schema dicts the requests are validated against (each
protocol's schema.py), so the published document is the check."""

from __future__ import annotations

from typing import Any

from pocketchat.server.protocols.anthropic import schema as anthropic_schema
from pocketchat.server.protocols.ollama import schema as ollama_schema
from pocketchat.server.protocols.openai import schema as openai_schema
from pocketchat.server.protocols.responses import schema as responses_schema

HEALTH = {
    "type": "object",
    "required": ["status", "busy", "queued", "slots", "model"],
    "properties": {
        "status": {"enum": ["loading", "ready", "error"]},
        "busy": {"type": "boolean"}, "queued": {"type": "integer"},
        "slots": {"type": "object", "properties": {"total": {"type": "integer"},
                                                   "busy": {"type": "integer"}}},
        "queue_size": {"type": "integer"}, "restarts": {"type": "integer"},
        "model": {"type": "string"}, "parallel_note": {"type": "string"},
        "error": {"type": "string"}, "cache": {"type": "object"},
    },
}


END_THINKING = {
    "type": "object", "required": ["id", "object", "status"],
    "properties": {"id": {"type": "string"}, "object": {"const": "end_thinking"},
                   "status": {"enum": ["ending", "not_thinking"]}},
}


ERRORS = {"/v1/chat/completions": "Error", "/v1/messages": "AnthropicError",
          "/v1/responses": "ResponsesError"}  # each protocol's own error shape


def _end_thinking(base: str) -> dict[str, Any]:
    """POST {base}/{id}/end_thinking: end a streaming answer's thought now (thinking.py)."""
    error = {"content": {"application/json": {"schema": {
        "$ref": f"#/components/schemas/{ERRORS[base]}"}}}}
    return {"post": {
        "summary": "End the thought of the answer in flight with this id (the one its stream's "
                   "first event carries) now; the answer follows on its stream.",
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "requestBody": {"required": False, "content": {"application/json": {
            "schema": {"type": "object"}}}},
        "responses": {"200": {"description": "ending: asked of the model; not_thinking: the "
                                             "answer is past its thought already.",
                              "content": {"application/json": {"schema": {
                                  "$ref": "#/components/schemas/EndThinking"}}}},
                      "401": {"description": "No or a wrong API key.", **error},
                      "403": {"description": "A Host or Origin this server does not answer.", **error},
                      "404": {"description": "No answer in flight has this id.", **error},
                      "415": {"description": "A body that is not JSON.", **error}}}}


def document(version: str = "0") -> dict[str, Any]:
    """The whole document (a fresh copy)."""
    health_response = {"description": "The server's state (503 until the model is ready).",
                       "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}}
    paths = {
        **openai_schema.PATHS, **anthropic_schema.PATHS, **responses_schema.PATHS,
        **ollama_schema.PATHS,
        **{f"{base}/{{id}}/end_thinking": _end_thinking(base)
           for base in ERRORS},
        "/health": {"get": {"summary": "Whether the model is loaded; no API key needed.",
                            "security": [],
                            "responses": {"200": health_response, "503": health_response,
                                          "403": {"description": "A Host header other than this "
                                                                 "machine's.",
                                                  "content": {"application/json": {"schema": {
                                                      "$ref": "#/components/schemas/Error"}}}}}}},
        "/openapi.json": {"get": {"summary": "This document.", "security": [],
                                  "responses": {"200": {"description": "OpenAPI 3.1",
                                                        "content": {"application/json": {
                                                            "schema": {"type": "object"}}}}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "pocketchat", "version": version,
                 "description": "OpenAI's chat completions and Responses API, Anthropic's "
                                "Messages API and Ollama's /api over one local model (every /v1 "
                                "path also without its prefix; any model name is answered). Every request "
                                "body is validated against the schemas below; a refusal is a "
                                "400 whose `error.param` names the field."},
        "paths": paths,
        "components": {"schemas": {**openai_schema.COMPONENTS, **anthropic_schema.COMPONENTS,
                                   **responses_schema.COMPONENTS, **ollama_schema.COMPONENTS,
                                   "Health": HEALTH,
                                   "EndThinking": END_THINKING},
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                           "apiKey": {"type": "apiKey", "in": "header",
                                                      "name": "x-api-key"}}},
        "security": [{"bearer": []}, {"apiKey": []}, {}],
    }
