"""OpenAI's wire format as JSON Schema (2020-12): the request bodies every request is
validated against before anything reaches the engine, and the responses, as published in
`/openapi.json` (the document is built from these, so what is checked is what is shown).

What a schema cannot say (a `tool_choice` that names one of the `tools`, two tools of one
name, the order of messages, `top_logprobs` without `logprobs`) is checked in requests.py and
said in the descriptions here. `x-error` / `x-code` on a part give the message and the code
of its refusal where the generic one would say less (validate.py).
"""

from __future__ import annotations

from typing import Any

from pocketchat.server.protocols.files import FILE_NOTE, RETRIEVAL
from pocketchat.server.thinking import EFFORT_BUDGETS, EFFORTS

MAX_STOPS = 4
MAX_N = 16
MAX_TOP_LOGPROBS = 20
MAX_LEGACY_LOGPROBS = 5
MAX_LOGIT_BIAS = 300  # token ids a request may bias (OpenAI takes up to 300)
COMPLETION_MAX_TOKENS = 16
FUNCTION_NAME = r"^[A-Za-z0-9_.:-]{1,64}$"
ROLES = ("system", "developer", "user", "assistant", "tool")
# chat_template_kwargs the server sets itself: a request may not replace them.
RESERVED_TEMPLATE_KEYS = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
                          "chat_template", "tokenize", "continue_final_message", "documents",
                          "return_dict", "return_assistant_tokens_mask", "raise_exception",
                          "strftime_now", "tools_in_user_message")
# Fields whose request cannot be honoured, and ignoring them would hand back something else:
# refused unless empty or off.
REFUSED = {
    "functions": "the legacy 'functions' field is not supported; send 'tools' instead",
    "function_call": "the legacy 'function_call' field is not supported; send 'tool_choice' instead",
    "audio": "audio output is not supported by this server",
    "prediction": "predicted outputs are not supported by this server",
    "web_search_options": "web search is not supported by this server",
}
OFF_VALUES = [None, False, [], {}, "none", "auto"]

REF = "#/components/schemas/"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": REF + name}


def _nullable(kind: str | list[str], **more: Any) -> dict[str, Any]:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    return {"type": [*kinds, "null"], **more}


def _number(lo: float, hi: float, what: str) -> dict[str, Any]:
    return _nullable("number", minimum=lo, maximum=hi, description=what)


TEXT_PART = {
    "type": "object",
    "description": "A part of a message's content: text, or (in a user message) a file: "
                   "`file.file_data` its bytes as base64 or a data: URL, `file.filename` its "
                   "name. " + FILE_NOTE,
    "properties": {
        "type": {"enum": ["text", "file"], "x-code": "unsupported_content",
                 "x-error": "'{param}' is {value}: only text and file parts are supported by "
                            "this model (it reads text)"},
        "text": {"type": "string"},
        "file": {"type": "object", "properties": {
            "file_data": {"type": "string"}, "filename": {"type": ["string", "null"]},
            "file_id": {"type": "null", "x-code": "unsupported_content",
                        "x-error": "'{param}': pocketchat has no Files API; send the file "
                                   "itself as 'file_data' (base64 or a data: URL)"}},
            "required": ["file_data"]},
    },
    "required": ["type"],
    "allOf": [{"if": {"properties": {"type": {"const": "text"}}}, "then": {"required": ["text"]},
               "else": {"required": ["file"]}}],
}

CONTENT = {"type": ["string", "array", "null"], "items": ref("TextPart"),
           "description": "Text, or a list of parts (text joined; files before it)."}

TOOL_CALL_IN = {
    "type": "object",
    "description": "A call the assistant made earlier in the conversation.",
    "properties": {
        "id": _nullable("string"),
        "type": {"enum": ["function", None]},
        "function": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "arguments": {"description": "The arguments as JSON text (an object is taken "
                                             "too, and written as JSON)."},
            },
            "required": ["name"],
        },
    },
    "required": ["function"],
}

MESSAGE = {
    "type": "object",
    "description": (
        "A message. system/developer/user messages need content; an assistant turn may carry "
        "tool_calls and reasoning_content; a tool message answers the calls of the assistant "
        "turn just before it (only tool messages between). A trailing assistant message is a "
        "prefill the answer continues; it may not be only tool calls."),
    "properties": {
        "role": {"enum": list(ROLES),
                 "x-error": "'{param}' must be one of system, developer, user, assistant, tool; got "
                            "{value} (a legacy 'function' result is sent as a 'tool' message with "
                            "its tool_call_id)"},
        "content": CONTENT,
        "name": _nullable("string"),
        "tool_calls": _nullable("array", items=ref("ToolCallIn")),
        "tool_call_id": _nullable("string"),
        "reasoning_content": _nullable("string", description="An assistant turn's thinking."),
    },
    "required": ["role"],
    "allOf": [{
        "if": {"properties": {"role": {"enum": ["system", "developer", "user"]}}},
        "then": {"properties": {"content": {"type": ["string", "array"]}},
                 "required": ["content"]},
    }],
}

FUNCTION = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": FUNCTION_NAME,
                 "x-error": "'{param}' must be 1 to 64 letters, digits, '_', '.', ':' or '-', got {value}"},
        "description": _nullable("string"),
        "parameters": _nullable("object", description="The arguments' JSON schema."),
        "strict": _nullable("boolean"),
    },
    "required": ["name"],
}

TOOL = {
    "type": "object",
    "description": "A function the model may call (tool names are unique within a request).",
    "properties": {
        "type": {"const": "function",
                 "x-error": "'{param}' must be \"function\" (the only kind of tool this server runs), "
                            "got {value}"},
        "function": ref("Function"),
    },
    "required": ["type", "function"],
}

TOOL_CHOICE = {
    "description": "\"none\", \"auto\", \"required\" (needs tools), or a named function among "
                   "the tools.",
    "anyOf": [
        {"enum": ["none", "auto", "required", None]},
        {"type": "object",
         "properties": {"type": {"const": "function"},
                        "function": {"type": "object", "properties": {"name": {"type": "string"}},
                                     "required": ["name"]}},
         "required": ["type", "function"]},
    ],
    "x-error": "'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", "
               "\"function\": {{\"name\": NAME}}}}, got {value}",
}

RESPONSE_FORMAT = {
    "type": ["object", "null"],
    "description": "Free text, any JSON object, or JSON valid against a schema (enforced while "
                   "sampling). A json_schema without `schema` is any JSON object; a schema the "
                   "engine cannot enforce is a 400 naming its part.",
    "properties": {
        "type": {"enum": ["text", "json_object", "json_schema"]},
        "json_schema": {
            "type": "object",
            "properties": {
                "name": _nullable("string"),
                "description": _nullable("string"),
                "schema": {"type": ["object", "boolean"],
                           "x-error": "'{param}' must be a JSON schema (an object), got {value}"},
                "strict": _nullable("boolean"),
            },
        },
    },
    "required": ["type"],
    "allOf": [{"if": {"properties": {"type": {"const": "json_schema"}}},
               "then": {"required": ["json_schema"]}}],
}

STOP = {"type": ["string", "array", "null"], "items": {"type": "string"}, "maxItems": MAX_STOPS,
        "description": f"Up to {MAX_STOPS} sequences that end the answer (not included)."}

LOGIT_BIAS = {
    "type": ["object", "null"],
    "description": "Token id (digits) to a bias from -100 to 100 added to its logit.",
    "propertyNames": {"pattern": "^[0-9]{1,12}$", "x-param": "logit_bias",
                      "x-error": "'logit_bias' keys must be token ids (digits), got {value}"},
    "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100,
                             "x-param": "logit_bias",
                             "x-error": "'logit_bias' values must be numbers from -100 to 100, got {value}"},
    "maxProperties": MAX_LOGIT_BIAS,
}


def _refused(key: str) -> dict[str, Any]:
    return {"enum": OFF_VALUES, "x-code": "unsupported_parameter",
            "x-error": f"'{key}': {REFUSED[key]}", "description": REFUSED[key]}


SAMPLING: dict[str, Any] = {
    "model": _nullable("string", description="This server's model (GET /v1/models), or omitted."),
    "max_tokens": _nullable("integer", minimum=1),
    "max_completion_tokens": _nullable("integer", minimum=1, description="Takes precedence over "
                                                                         "max_tokens."),
    "temperature": _number(0, 2, "Sampling temperature (0: greedy)."),
    "top_p": _number(0, 1, "Nucleus sampling."),
    "top_k": _nullable("integer", minimum=0, description="llama.cpp's top-k (0: off)."),
    "min_p": _number(0, 1, "llama.cpp's min-p."),
    "repeat_penalty": _number(0, 10, "llama.cpp's repeat penalty."),
    "presence_penalty": _number(-2, 2, "OpenAI's presence penalty."),
    "frequency_penalty": _number(-2, 2, "OpenAI's frequency penalty."),
    "seed": _nullable("integer", minimum=-(2**63),
                      description="Seed (taken modulo 2^32); answer i of n uses seed + i."),
    "n": _nullable("integer", minimum=1, maximum=MAX_N, description="Answers to give."),
    "stop": STOP,
    "stream": _nullable("boolean"),
    "stream_options": _nullable("object", properties={"include_usage": _nullable("boolean")}),
    "ignore_eos": _nullable("boolean", description="Go on past the end of text (benchmarks)."),
    "logit_bias": LOGIT_BIAS,
    "return_progress": _nullable("boolean", description="llama.cpp's prompt_progress events "
                                                        "while a long prompt is read (streams)."),
}

CHAT_REQUEST = {
    "type": "object",
    "description": "Unknown fields are ignored, as OpenAI-compatible servers do.",
    "properties": {
        "messages": {"type": "array", "minItems": 1, "items": ref("Message")},
        **SAMPLING,
        "logprobs": _nullable("boolean"),
        "top_logprobs": _nullable("integer", minimum=0, maximum=MAX_TOP_LOGPROBS,
                                  description="Needs logprobs: true."),
        "tools": _nullable("array", items=ref("Tool")),
        "tool_choice": TOOL_CHOICE,
        "parallel_tool_calls": _nullable("boolean"),
        "response_format": ref("ResponseFormat"),
        "reasoning_effort": {"enum": [*EFFORTS, None], "description": (
            "How long the model may think: " + ", ".join(
                f"{k}: {'off' if not on else 'no budget' if n is None else f'{n} tokens'}"
                for k, (on, n) in EFFORT_BUDGETS.items()) + ".")},
        "thinking_budget_tokens": _nullable(
            "integer", minimum=0, maximum=1_000_000,
            description="The most tokens the thought may take, then the answer follows (0: "
                        "no thinking); wins over reasoning_effort."),
        "chat_template_kwargs": _nullable("object", properties={
            "enable_thinking": _nullable("boolean")},
            propertyNames={"not": {"enum": list(RESERVED_TEMPLATE_KEYS)},
                           "x-error": "'chat_template_kwargs.{key}' is set by the server itself "
                                      "and cannot be replaced"},
            description="Passed to the chat template (enable_thinking: false turns thinking off)."),
        "modalities": {"enum": [None, ["text"]], "x-code": "unsupported_parameter",
                       "x-error": "'modalities': only [\"text\"] is supported"},
        **{key: _refused(key) for key in REFUSED},
    },
    "required": ["messages"],
}

PROMPT = {
    "description": "A string, token ids, or a list of either (one answer each).",
    "anyOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
        {"type": "array", "minItems": 1, "items": {"anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}]}},
    ],
    "x-error": "'prompt' must be a string, a list of token ids, or a list of strings or of "
               "token-id lists",
    "x-code": "invalid_type",
}

COMPLETION_REQUEST = {
    "type": "object",
    "description": "Unknown fields are ignored. prompts x n is at most 16; echo needs text prompts.",
    "properties": {
        "prompt": PROMPT,
        **SAMPLING,
        "max_tokens": _nullable("integer", minimum=1, description="Default 16, as OpenAI's."),
        "echo": _nullable("boolean"),
        "logprobs": _nullable("integer", minimum=0, maximum=MAX_LEGACY_LOGPROBS),
        "suffix": {"enum": [None, ""], "x-code": "unsupported_parameter",
                   "x-error": "'suffix' is not supported by this server"},
        "best_of": {"enum": [None, 1], "x-code": "unsupported_parameter",
                    "x-error": "'best_of' is not supported by this server"},
    },
    "required": ["prompt"],
}

# -- responses ------------------------------------------------------------------------------

_INT = {"type": "integer"}
_STR = {"type": "string"}
TOP_LOGPROB = {"type": "object", "required": ["token", "logprob", "bytes"], "properties": {
    "token": _STR, "logprob": {"type": "number"}, "bytes": {"type": "array", "items": _INT}}}
USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
         "properties": {"prompt_tokens": _INT, "completion_tokens": _INT, "total_tokens": _INT,
                        "prompt_tokens_details": {"type": "object", "properties": {
                            "cached_tokens": _INT}},
                        "completion_tokens_details": {"type": "object", "properties": {
                            "reasoning_tokens": _INT}},
                        "thinking_end": {"enum": ["", "model", "budget", "user"],
                                         "description": "How the thought ended: by itself, at "
                                                        "its budget, or ended by the client."}}}
TOOL_CALL_OUT = {"type": "object", "required": ["id", "type", "function"], "properties": {
    "id": _STR, "type": {"const": "function"},
    "function": {"type": "object", "required": ["name", "arguments"],
                 "properties": {"name": _STR, "arguments": _STR}}}}
CHAT_COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "id": _STR, "object": {"const": "chat.completion"}, "created": _INT, "model": _STR,
        "choices": {"type": "array", "items": {
            "type": "object", "required": ["index", "message", "finish_reason"],
            "properties": {
                "index": _INT,
                "message": {"type": "object", "required": ["role", "content"], "properties": {
                    "role": {"const": "assistant"}, "content": {"type": ["string", "null"]},
                    "reasoning_content": _STR,
                    "tool_calls": {"type": "array", "items": ref("ToolCallOut")}}},
                "logprobs": {"type": ["object", "null"], "properties": {
                    "content": {"type": "array", "items": {"allOf": [ref("TopLogprob")], "properties": {
                        "top_logprobs": {"type": "array", "items": ref("TopLogprob")}}}}}},
                "finish_reason": {"enum": ["stop", "length", "tool_calls", "cancelled"]},
            }}},
        "usage": ref("Usage"),
        "timings": {"type": "object"},
        "pocketchat": RETRIEVAL,
    },
}
TEXT_COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "id": _STR, "object": {"const": "text_completion"}, "created": _INT, "model": _STR,
        "choices": {"type": "array", "items": {
            "type": "object", "required": ["index", "text", "finish_reason"],
            "properties": {"index": _INT, "text": _STR,
                           "logprobs": {"type": ["object", "null"]},
                           "finish_reason": {"enum": ["stop", "length"]}}}},
        "usage": ref("Usage"),
    },
}
MODEL = {"type": "object", "required": ["id", "object", "owned_by"], "properties": {
    "id": _STR, "object": {"const": "model"}, "created": _INT, "owned_by": _STR,
    "max_model_len": _INT}}
MODEL_LIST = {"type": "object", "required": ["object", "data"], "properties": {
    "object": {"const": "list"}, "data": {"type": "array", "items": ref("Model")}}}
ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"],
    "properties": {"message": _STR, "type": _STR, "param": {"type": ["string", "null"]},
                   "code": {"type": ["string", "null"]}}}}}

COMPONENTS: dict[str, dict[str, Any]] = {
    "ChatCompletionRequest": CHAT_REQUEST, "CompletionRequest": COMPLETION_REQUEST,
    "Message": MESSAGE, "TextPart": TEXT_PART, "ToolCallIn": TOOL_CALL_IN, "Tool": TOOL,
    "Function": FUNCTION, "ResponseFormat": RESPONSE_FORMAT,
    "ChatCompletion": CHAT_COMPLETION, "TextCompletion": TEXT_COMPLETION, "Usage": USAGE,
    "ToolCallOut": TOOL_CALL_OUT, "TopLogprob": TOP_LOGPROB, "Model": MODEL,
    "ModelList": MODEL_LIST, "Error": ERROR,
}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): {"description": WHY[s], "content": {"application/json": {"schema": ref("Error")}}}
            for s in statuses}


WHY = {400: "The request is invalid; `param` names the field.", 401: "Missing or wrong API key.",
       403: "A Host header other than this machine's.", 404: "No such model.",
       413: "The body is over the limit.", 415: "The body is not application/json.",
       429: "The queue is full (see Retry-After).", 500: "The model failed (it is restarted).",
       503: "The model is loading or failed to load, or the server is stopping."}
SSE_EVENT = {  # OpenAPI 3.1 without `itemSchema`: a stream's `schema` describes each event
    "type": "object", "required": ["data"],
    "properties": {"data": {"type": "string"}, "event": {"type": "string"},
                   "id": {"type": "string"}, "retry": {"type": "integer"}},
}


def sse(description: str) -> dict[str, Any]:
    """A streamed response's media type: server-sent events, each as `SSE_EVENT`."""
    return {"text/event-stream": {"schema": SSE_EVENT, "description": description}}


SSE = sse("with `stream`: `data: {chunk}` events, then `data: [DONE]`")


def _post(summary: str, request: str, response: str) -> dict[str, Any]:
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": ref(request)}}},
        "responses": {"200": {"description": "The answer (JSON, or events with `stream`).",
                              "content": {"application/json": {"schema": ref(response)}, **SSE}},
                      **_errors(400, 401, 403, 404, 413, 415, 429, 500, 503)},
    }}


PATHS: dict[str, Any] = {
    "/v1/chat/completions": _post("A chat answer.", "ChatCompletionRequest", "ChatCompletion"),
    "/v1/completions": _post("A raw prompt continued (no chat template).", "CompletionRequest",
                             "TextCompletion"),
    "/v1/models": {"get": {
        "summary": "The one model this server runs.",
        "responses": {"200": {"description": "The model list.",
                              "content": {"application/json": {"schema": ref("ModelList")}},
                              "links": {"GetModel": {"operationId": "getModel", "parameters": {
                                  "name": "$response.body#/data/0/id"}}}},
                      **_errors(401, 403)}}},
    "/v1/models/{name}": {"get": {
        "operationId": "getModel",
        "summary": "One model by name.",
        "parameters": [{"name": "name", "in": "path", "required": True, "schema": _STR}],
        "responses": {"200": {"description": "The model.",
                              "content": {"application/json": {"schema": ref("Model")}}},
                      **_errors(401, 403, 404)}}},
}
