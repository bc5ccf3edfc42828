"""OpenAI's chat-completions wire format: a request body -> `ChatRequest`, stats -> `usage`.

Every field OpenAI documents is either used, accepted and ignored (it changes nothing a
client relies on: `user`, `metadata`, `store`, penalties ...), or refused with a 400 that
names it where ignoring it would mislead (`n` > 1, `tools`, `logprobs`, a JSON
`response_format`, image parts). Unknown fields are ignored, as OpenAI-compatible servers do.

Thinking: on by default; off for a request with `reasoning_effort: "none"` or
`chat_template_kwargs: {"enable_thinking": false}` (the vLLM / llama.cpp server switch).
Extensions of llama.cpp's server: `top_k`, `ignore_eos`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pocketchat.engines.types import ChatOptions, Message, Stats
from pocketchat.errors import ApiError

MAX_STOPS = 4
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Fields whose request cannot be honoured, and ignoring them would hand back something else.
REFUSED = {
    "tools": "tool calling is not supported by this server",
    "functions": "function calling is not supported by this server",
    "tool_choice": "tool calling is not supported by this server",
    "function_call": "function calling is not supported by this server",
    "logprobs": "logprobs are not supported by this server",
    "top_logprobs": "logprobs are not supported by this server",
    "logit_bias": "logit_bias is not supported by this server",
    "audio": "audio output is not supported by this server",
    "prediction": "predicted outputs are not supported by this server",
    "web_search_options": "web search is not supported by this server",
}


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completions request."""

    messages: tuple[Message, ...]
    options: ChatOptions
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    stop: tuple[str, ...] = ()


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(message, status=400, param=param, code=code)


MAX_INT_DIGITS = 100  # longer integers are refused (a float cannot even hold 310 digits)


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise bad(f"the request body has an integer of {digits} digits; at most {MAX_INT_DIGITS} "
                  "are accepted", code="invalid_json")
    return int(text)


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong with it (pathological
    bodies included: nesting deeper than Python's parser goes, integers with huge digit counts)."""
    try:
        data = json.loads(body, parse_int=_int)
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


def _number(data: dict, key: str, lo: float, hi: float) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(f"'{key}' must be a number", key, "invalid_type")
    if not lo <= value <= hi:
        raise bad(f"'{key}' must be between {lo:g} and {hi:g}, got {value}", key, "invalid_value")
    return float(value)


def _integer(data: dict, key: str, lo: int, hi: int | None = None) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"'{key}' must be an integer", key, "invalid_type")
    if value < lo or (hi is not None and value > hi):
        raise bad(f"'{key}' must be at least {lo}" + (f" and at most {hi}" if hi is not None else "")
                  + f", got {value}", key, "invalid_value")
    return value


def _flag(data: dict, key: str) -> bool | None:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise bad(f"'{key}' must be true or false", key, "invalid_type")
    return value


def _content(value: Any, where: str) -> str:
    """Message content: a string, or a list of text parts (joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise bad(f"{where}.content[{i}] must be an object with a 'type'", f"{where}.content")
            if part["type"] != "text":
                raise bad(f"{where}.content[{i}] is of type {part['type']!r}: only text is supported "
                          "by this model", f"{where}.content", "unsupported_content")
            if not isinstance(part.get("text"), str):
                raise bad(f"{where}.content[{i}].text must be a string", f"{where}.content")
            texts.append(part["text"])
        return "".join(texts)
    raise bad(f"{where}.content must be a string or a list of text parts", f"{where}.content",
              "invalid_type")


def parse_messages(value: Any) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise bad("'messages' must be a non-empty list of messages", "messages",
                  "invalid_type" if not isinstance(value, list) else "invalid_value")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(f"{where} must be an object with 'role' and 'content'", where, "invalid_type")
        role = m.get("role")
        if role in ("tool", "function") or m.get("tool_calls") or m.get("function_call"):
            raise bad(f"{where}: tool and function messages are not supported by this server",
                      where, "unsupported_message")
        if role not in ROLES:
            raise bad(f"{where}.role must be one of system, developer, user, assistant; got {role!r}",
                      f"{where}.role", "invalid_value")
        content = m.get("content")
        text = "" if content is None and role == "assistant" else _content(content, where)
        out.append(Message(ROLES[role], text))  # type: ignore[arg-type]
    if out[-1].role == "assistant":
        raise bad("the last message must not be the assistant's (continuing an answer is not "
                  "supported)", f"messages[{len(out) - 1}]", "invalid_value")
    return tuple(out)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("'stop' must be a string or a list of strings", "stop", "invalid_type")
    if len(stops) > MAX_STOPS:
        raise bad(f"'stop' takes at most {MAX_STOPS} sequences", "stop", "invalid_value")
    return tuple(s for s in stops if s)


def _thinking(data: dict) -> bool:
    effort = data.get("reasoning_effort")
    if effort is not None and not isinstance(effort, str):
        raise bad("'reasoning_effort' must be a string", "reasoning_effort", "invalid_type")
    kwargs = data.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise bad("'chat_template_kwargs' must be an object", "chat_template_kwargs", "invalid_type")
    switch = (kwargs or {}).get("enable_thinking")
    if switch is not None and not isinstance(switch, bool):
        raise bad("'chat_template_kwargs.enable_thinking' must be true or false",
                  "chat_template_kwargs", "invalid_type")
    if switch is not None:
        return switch
    return effort != "none"


def _refuse_misleading(data: dict) -> None:
    for key, why in REFUSED.items():
        value = data.get(key)
        if value not in (None, False, [], {}, "none", "auto"):
            raise bad(f"'{key}': {why}", key, "unsupported_parameter")
    n = _integer(data, "n", 1)
    if n is not None and n != 1:
        raise bad("'n' must be 1: this server returns one choice per request", "n", "unsupported_parameter")
    fmt = data.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise bad("'response_format': only {\"type\": \"text\"} is supported (no JSON mode)",
                  "response_format", "unsupported_parameter")
    modalities = data.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise bad("'modalities': only [\"text\"] is supported", "modalities", "unsupported_parameter")


def parse_chat_request(body: bytes) -> ChatRequest:
    """Validate a chat-completions body; ApiError (400) names the first bad field."""
    data = parse_json(body)
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("'model' must be a string", "model", "invalid_type")
    messages = parse_messages(data.get("messages"))
    _refuse_misleading(data)
    max_tokens = _integer(data, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(data, "max_tokens", 1)
    stream = bool(_flag(data, "stream"))
    stream_options = data.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise bad("'stream_options' must be an object", "stream_options", "invalid_type")
    include_usage = bool(_flag(stream_options or {}, "include_usage"))
    seed = _integer(data, "seed", -(2**63))
    options = ChatOptions(
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0),
        top_k=_integer(data, "top_k", 0),
        max_tokens=max_tokens,
        thinking=_thinking(data),
        seed=None if seed is None else seed % 2**32,
        ignore_eos=bool(_flag(data, "ignore_eos")),
    )
    return ChatRequest(messages=messages, options=options, model=model or None, stream=stream,
                       include_usage=include_usage, stop=_stops(data.get("stop")))


# -- answers ------------------------------------------------------------------------------------


def usage(stats: Stats) -> dict[str, Any]:
    """OpenAI's `usage`: the whole prompt, the part of it the engine reused from its cache
    (`cached_tokens`: not evaluated for this request), and the generated tokens."""
    prompt, completion = prompt_length(stats), int(stats.generated_tokens)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": reused_tokens(stats)},
    }


def prompt_length(stats: Stats) -> int:
    """The whole prompt in tokens (the evaluated ones when an engine gives no length)."""
    return stats.prompt_length or stats.prompt_tokens


def reused_tokens(stats: Stats) -> int:
    """Prompt tokens taken from the engine's cache, not evaluated for this request."""
    return stats.reused_tokens


def timings(stats: Stats) -> dict[str, Any]:
    """llama.cpp server's `timings` extension: the engine's own prompt and decode figures."""
    return {
        "prompt_n": stats.prompt_tokens,
        "prompt_ms": round(stats.prompt_seconds * 1000, 3),
        "prompt_per_second": round(stats.prompt_tok_s, 3),
        "predicted_n": stats.generated_tokens,
        "predicted_ms": round(stats.decode_seconds * 1000, 3),
        "predicted_per_second": round(stats.decode_tok_s, 3),
        "cache_n": reused_tokens(stats),
    }


def error_body(exc: ApiError) -> dict[str, Any]:
    message = exc.message
    if exc.hint:
        message += ("" if message.endswith((".", "!", "?")) else ".") + " " + exc.hint
    return {"error": {"message": message, "type": exc.type, "param": exc.param, "code": exc.code}}
