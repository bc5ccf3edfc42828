"""Ollama's native API as JSON Schema (2020-12): the bodies of `POST /api/chat`,
`/api/generate` and `/api/show`, validated here and published in `/openapi.json`.

Fields a server of one loaded model has no use for (`keep_alive`, `options.num_thread`,
`options.num_gpu` and Ollama's other load options) are accepted and change nothing; unknown
fields are ignored, as Ollama does. What a schema cannot say (images refused, `template`
refused, a tool result answering a call) is checked in requests.py.
"""

from __future__ import annotations

from typing import Any

REF = "#/components/schemas/"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": REF + name}


FORMAT = {"description": '"json" (any JSON object) or a JSON schema the answer must follow.',
          "anyOf": [{"const": "json"}, {"type": "object"}, {"const": ""}]}
THINK = {"description": "true/false, or an effort: low, medium, high (the thought's budget).",
         "anyOf": [{"type": "boolean"}, {"enum": ["low", "medium", "high"]}]}
OPTIONS = {
    "type": "object",
    "description": "Sampling options (others of Ollama's are accepted and change nothing).",
    "properties": {
        "num_ctx": {"type": "integer", "minimum": 1},
        "num_predict": {"type": "integer", "minimum": -2},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": 0},
        "min_p": {"type": "number", "minimum": 0, "maximum": 1},
        "seed": {"type": "integer"},
        "stop": {"type": ["array", "string"], "items": {"type": "string"}, "maxItems": 16},
        "repeat_penalty": {"type": "number", "minimum": 0},
        "presence_penalty": {"type": "number"},
        "frequency_penalty": {"type": "number"},
    },
}
TOOL_CALL = {"type": "object", "properties": {"function": {
    "type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                     "arguments": {"type": "object"}},
    "required": ["name"]}}, "required": ["function"]}
MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"enum": ["system", "user", "assistant", "tool"]},
        "content": {"type": "string"},
        "thinking": {"type": "string"},
        "images": {"type": "array"},
        "tool_calls": {"type": "array", "items": ref("OllamaToolCall")},
        "tool_name": {"type": "string"},
    },
    "required": ["role"],
}
TOOL = {"type": "object", "properties": {"type": {"const": "function"}, "function": {
    "type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                     "description": {"type": "string"},
                                     "parameters": {"type": "object"}},
    "required": ["name"]}}, "required": ["function"]}
COMMON = {"model": {"type": "string"}, "stream": {"type": "boolean"}, "format": ref("OllamaFormat"),
          "options": ref("OllamaOptions"), "think": ref("OllamaThink"),
          "keep_alive": {"type": ["string", "number"]}}
CHAT = {"type": "object", "properties": {
    **COMMON, "messages": {"type": "array", "items": ref("OllamaMessage")},
    "tools": {"type": "array", "items": ref("OllamaTool")}}, "required": ["messages"]}
GENERATE = {"type": "object", "properties": {
    **COMMON, "prompt": {"type": "string"}, "suffix": {"type": "string"},
    "system": {"type": "string"}, "template": {"type": "string"}, "raw": {"type": "boolean"},
    "images": {"type": "array"}, "context": {"type": "array", "items": {"type": "integer"}}}}
SHOW = {"type": "object", "properties": {"model": {"type": "string"}, "name": {"type": "string"},
                                         "verbose": {"type": "boolean"}}}

COMPONENTS: dict[str, Any] = {
    "OllamaFormat": FORMAT, "OllamaThink": THINK, "OllamaOptions": OPTIONS,
    "OllamaToolCall": TOOL_CALL, "OllamaMessage": MESSAGE, "OllamaTool": TOOL,
    "OllamaChatRequest": CHAT, "OllamaGenerateRequest": GENERATE, "OllamaShowRequest": SHOW,
}


ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
COMPONENTS["OllamaError"] = ERROR
WHY = {400: "The request is invalid.", 401: "Missing or wrong API key.",
       403: "A Host header other than this machine's.", 413: "The body is over the limit.",
       415: "The body is not application/json.", 429: "The queue is full (see Retry-After).",
       500: "The model failed (it is restarted).",
       503: "The model is loading or failed to load, or the server is stopping."}


def _post(summary: str, request: str) -> dict[str, Any]:
    return {"post": {"summary": summary, "requestBody": {"required": True, "content": {
        "application/json": {"schema": ref(request)}}},
        "responses": {"200": {"description": "The answer as one JSON object, or (`stream`, "
                              "the default) newline-delimited JSON objects ending with "
                              "`done: true`."},
                      **{str(code): {"description": why, "content": {"application/json": {
                          "schema": ref("OllamaError")}}} for code, why in WHY.items()}}}}


PATHS: dict[str, Any] = {
    "/api/chat": _post("Ollama's chat: the conversation answered by the loaded model.",
                       "OllamaChatRequest"),
    "/api/generate": _post("Ollama's generate: a prompt answered (or continued, `raw`).",
                           "OllamaGenerateRequest"),
    "/api/show": _post("The loaded model's details, in Ollama's shape.", "OllamaShowRequest"),
}
