"""OpenAI's wire format: request bodies -> `ChatRequest` / `CompletionRequest`, stats -> `usage`.

Every field OpenAI documents is either used, accepted and ignored (it changes nothing a
client relies on: `user`, `metadata`, `store` ...), or refused with a 400 that names it where
ignoring it would mislead (legacy `functions`, audio, image parts). Unknown
fields are ignored, as OpenAI-compatible servers do.

Used: `tools`, `tool_choice`, `parallel_tool_calls` (the engine renders the tools with the
model's template and parses its calls), `response_format` (`json_object`, `json_schema`:
enforced by the engine while sampling), `logprobs` / `top_logprobs` (up to 20), `n` (up to
MAX_N answers, seeds seed, seed+1, ...), the sampling fields (`temperature`, `top_p`, `min_p`,
`presence_penalty`, `frequency_penalty`, `logit_bias`, llama.cpp's `top_k`, `repeat_penalty`, `ignore_eos`).
History: assistant turns with `tool_calls` and `reasoning_content`, `tool` results; a trailing
assistant message is a prefill the answer continues.

Thinking: on by default; off for a request with `reasoning_effort: "none"` or
`chat_template_kwargs: {"enable_thinking": false}` (the vLLM / llama.cpp server switch); the
other `chat_template_kwargs` reach the template.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

from pocketchat.engines.types import (ChatOptions, Message, PromptProgress, Stats, TokenLogprob,
                                      ToolCall)
from pocketchat.errors import ApiError

MAX_STOPS = 4
MAX_N = 16
MAX_TOP_LOGPROBS = 20
COMPLETION_MAX_TOKENS = 16
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
# Fields whose request cannot be honoured, and ignoring them would hand back something else.
REFUSED = {
    "functions": "the legacy 'functions' field is not supported; send 'tools' instead",
    "function_call": "the legacy 'function_call' field is not supported; send 'tool_choice' instead",
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
    n: int = 1
    logprobs: bool = False  # send choices[].logprobs (options.logprobs holds top_logprobs)
    return_progress: bool = False  # stream `prompt_progress` events while the prompt is read


Prompt = str | tuple[int, ...]  # a raw prompt: text, or token ids


@dataclass(frozen=True)
class CompletionRequest:
    """A validated legacy completions request (`/v1/completions`): raw prompts (text or token
    ids), each answered `n` times; choice `i * n + j` is prompt i's answer j."""

    prompts: tuple[Prompt, ...]
    options: ChatOptions
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    stop: tuple[str, ...] = ()
    n: int = 1
    echo: bool = False
    logprobs: int | None = None  # legacy: None off, N the alternatives per token (0..5)
    return_progress: bool = False  # stream `prompt_progress` events while the prompt is read


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


def _string(data: dict, key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise bad(f"{where}.{key} must be a string", f"{where}.{key}", "invalid_type")
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


def _tool_calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    """An assistant turn's `tool_calls`: [{id, type: function, function: {name, arguments}}]."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad(f"{where}.tool_calls must be a list", f"{where}.tool_calls", "invalid_type")
    calls = []
    for i, call in enumerate(value):
        at = f"{where}.tool_calls[{i}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or call.get("type", "function") != "function":
            raise bad(f"{at} must be {{\"type\": \"function\", \"function\": {{\"name\", "
                      "\"arguments\"}}", at, "invalid_value")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"{at}.function.name must be a non-empty string", f"{at}.function.name",
                      "invalid_type")
        arguments = fn.get("arguments")
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):  # some clients send the object itself
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise bad(f"{at}.id must be a string", f"{at}.id", "invalid_type")
        calls.append(ToolCall(id=call_id or f"call_{i}", name=name, arguments=arguments))
    return tuple(calls)


def _message(m: Any, where: str) -> Message:
    if not isinstance(m, dict):
        raise bad(f"{where} must be an object with 'role' and 'content'", where, "invalid_type")
    role = m.get("role")
    if role == "function":
        raise bad(f"{where}: legacy 'function' messages are not supported; send the result as a "
                  "'tool' message with its tool_call_id", where, "unsupported_message")
    if role not in ROLES:
        raise bad(f"{where}.role must be one of system, developer, user, assistant, tool; got {role!r}",
                  f"{where}.role", "invalid_value")
    content = m.get("content")
    if role == "assistant":
        text = "" if content is None else _content(content, where)
        reasoning = m.get("reasoning_content")
        if reasoning is not None and not isinstance(reasoning, str):
            raise bad(f"{where}.reasoning_content must be a string", f"{where}.reasoning_content",
                      "invalid_type")
        return Message("assistant", text, tool_calls=_tool_calls(m.get("tool_calls"), where),
                       reasoning=reasoning or None)
    if role == "tool":
        return Message("tool", "" if content is None else _content(content, where),
                       tool_call_id=_string(m, "tool_call_id", where), name=_string(m, "name", where))
    return Message(ROLES[role], _content(content, where))  # type: ignore[arg-type]


def parse_messages(value: Any) -> tuple[Message, ...]:
    """OpenAI-style messages (dicts) -> `Message`s; a trailing assistant text is a prefill."""
    if not isinstance(value, list) or not value:
        raise bad("'messages' must be a non-empty list of messages", "messages",
                  "invalid_type" if not isinstance(value, list) else "invalid_value")
    out = tuple(m if isinstance(m, Message) else _message(m, f"messages[{i}]")
                for i, m in enumerate(value))
    if out[-1].role == "assistant" and out[-1].tool_calls:
        raise bad("the last message is the assistant's tool calls: add their results as 'tool' "
                  "messages before asking for the next answer", f"messages[{len(out) - 1}]",
                  "invalid_value")
    return out


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("'stop' must be a string or a list of strings", "stop", "invalid_type")
    if len(stops) > MAX_STOPS:
        raise bad(f"'stop' takes at most {MAX_STOPS} sequences", "stop", "invalid_value")
    return tuple(s for s in stops if s)


def _template_kwargs(data: dict) -> tuple[bool | None, dict | None]:
    """(enable_thinking, the other chat_template_kwargs) of a request."""
    kwargs = data.get("chat_template_kwargs")
    if kwargs is None:
        return None, None
    if not isinstance(kwargs, dict):
        raise bad("'chat_template_kwargs' must be an object", "chat_template_kwargs", "invalid_type")
    switch = kwargs.get("enable_thinking")
    if switch is not None and not isinstance(switch, bool):
        raise bad("'chat_template_kwargs.enable_thinking' must be true or false",
                  "chat_template_kwargs.enable_thinking", "invalid_type")
    rest = {k: v for k, v in kwargs.items() if k != "enable_thinking"}
    return switch, rest or None


def _thinking(data: dict, switch: bool | None) -> bool:
    effort = data.get("reasoning_effort")
    if effort is not None and not isinstance(effort, str):
        raise bad("'reasoning_effort' must be a string", "reasoning_effort", "invalid_type")
    if switch is not None:
        return switch
    return effort != "none"


def parse_tools(value: Any) -> tuple[dict, ...]:
    """`tools`: [{"type": "function", "function": {"name", "description"?, "parameters"?}}]."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad("'tools' must be a list of tools", "tools", "invalid_type")
    seen: set[str] = set()
    for i, tool in enumerate(value):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise bad(f"{at} must be an object", at, "invalid_type")
        if tool.get("type") != "function":
            raise bad(f"{at}.type must be \"function\" (the only kind of tool this server runs), "
                      f"got {tool.get('type')!r}", f"{at}.type", "invalid_value")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise bad(f"{at}.function must be an object with a 'name'", f"{at}.function", "invalid_type")
        name = fn.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.match(name):
            raise bad(f"{at}.function.name must be 1 to 64 letters, digits, '_' or '-', got {name!r}",
                      f"{at}.function.name", "invalid_value")
        if name in seen:
            raise bad(f"{at}: two tools are named {name!r}", f"{at}.function.name", "invalid_value")
        seen.add(name)
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise bad(f"{at}.function.description must be a string", f"{at}.function.description",
                      "invalid_type")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad(f"{at}.function.parameters must be a JSON schema (an object)",
                      f"{at}.function.parameters", "invalid_type")
    return tuple(value)


def parse_tool_choice(value: Any, tools: tuple[dict, ...]) -> str | dict:
    """`tool_choice`: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}."""
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise bad(f"'tool_choice' must be \"none\", \"auto\", \"required\" or a named function, "
                      f"got {value!r}", "tool_choice", "invalid_value")
        if value == "required" and not tools:
            raise bad("'tool_choice' is \"required\" but no 'tools' were given", "tool_choice",
                      "invalid_value")
        return value
    fn = value.get("function") if isinstance(value, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise bad("'tool_choice' must be a string or {\"type\": \"function\", \"function\": "
                  "{\"name\": NAME}}", "tool_choice", "invalid_value")
    names = [t["function"]["name"] for t in tools]
    if name not in names:
        raise bad(f"'tool_choice' names the function {name!r}, which is not among the tools"
                  + (f" ({', '.join(names)})" if names else " (none were given)"),
                  "tool_choice.function.name", "invalid_value")
    return {"type": "function", "function": {"name": name}}


def parse_response_format(value: Any) -> dict | None:
    """`response_format`: text (None), {"type": "json_object"} or a `json_schema` to follow."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise bad("'response_format.json_schema' must be an object with 'name' and 'schema'",
                      "response_format.json_schema", "invalid_type")
        schema = spec.get("schema", {})
        if not isinstance(schema, (dict, bool)):
            raise bad("'response_format.json_schema.schema' must be a JSON schema (an object)",
                      "response_format.json_schema.schema", "invalid_type")
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise bad("'response_format.json_schema.strict' must be true or false",
                      "response_format.json_schema.strict", "invalid_type")
        name = spec.get("name")
        if name is not None and not isinstance(name, str):
            raise bad("'response_format.json_schema.name' must be a string",
                      "response_format.json_schema.name", "invalid_type")
        return {"type": "json_schema", "json_schema": {**spec, "schema": schema}}
    raise bad("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", "
              f"got {kind!r}", "response_format.type" if isinstance(value, dict) else "response_format",
              "invalid_value")


def _refuse_misleading(data: dict) -> None:
    for key, why in REFUSED.items():
        value = data.get(key)
        if value not in (None, False, [], {}, "none", "auto"):
            raise bad(f"'{key}': {why}", key, "unsupported_parameter")
    modalities = data.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise bad("'modalities': only [\"text\"] is supported", "modalities", "unsupported_parameter")


def _sampling(data: dict) -> dict[str, Any]:
    """The ChatOptions fields both endpoints share."""
    max_tokens = _integer(data, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(data, "max_tokens", 1)
    seed = _integer(data, "seed", -(2**63))
    return dict(
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0),
        top_k=_integer(data, "top_k", 0),
        min_p=_number(data, "min_p", 0.0, 1.0),
        repeat_penalty=_number(data, "repeat_penalty", 0.0, 10.0),
        presence_penalty=_number(data, "presence_penalty", -2.0, 2.0),
        frequency_penalty=_number(data, "frequency_penalty", -2.0, 2.0),
        max_tokens=max_tokens,
        seed=None if seed is None else seed % 2**32,
        ignore_eos=bool(_flag(data, "ignore_eos")),
        logit_bias=parse_logit_bias(data.get("logit_bias")),
    )


MAX_LOGIT_BIAS = 300  # token ids a request may bias (OpenAI takes up to 300)


def parse_logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """`logit_bias`: {"token id": bias from -100 to 100} -> ((id, bias), ...)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise bad("'logit_bias' must be an object mapping token ids to a bias from -100 to 100",
                  "logit_bias", "invalid_type")
    if len(value) > MAX_LOGIT_BIAS:
        raise bad(f"'logit_bias' takes at most {MAX_LOGIT_BIAS} tokens", "logit_bias", "invalid_value")
    out = []
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise bad(f"'logit_bias' keys must be token ids (digits), got {key!r}", "logit_bias",
                      "invalid_value")
        if (isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias)
                or not -100 <= bias <= 100):
            raise bad(f"'logit_bias[{key}]' must be a number from -100 to 100", "logit_bias",
                      "invalid_value")
        out.append((int(key), float(bias)))
    return tuple(out)


def _streaming(data: dict) -> tuple[bool, bool]:
    """(stream, stream_options.include_usage)."""
    stream = bool(_flag(data, "stream"))
    stream_options = data.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise bad("'stream_options' must be an object", "stream_options", "invalid_type")
    return stream, bool(_flag(stream_options or {}, "include_usage"))


def _model(data: dict) -> str | None:
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("'model' must be a string", "model", "invalid_type")
    return model or None


def parse_chat_request(body: bytes) -> ChatRequest:
    """Validate a chat-completions body; ApiError (400) names the first bad field."""
    data = parse_json(body)
    model = _model(data)
    messages = parse_messages(data.get("messages"))
    _refuse_misleading(data)
    n = _integer(data, "n", 1, MAX_N) or 1
    logprobs = bool(_flag(data, "logprobs"))
    top = _integer(data, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
    tools = parse_tools(data.get("tools"))
    parallel = _flag(data, "parallel_tool_calls")
    switch, template_kwargs = _template_kwargs(data)
    stream, include_usage = _streaming(data)
    options = ChatOptions(
        **_sampling(data),
        thinking=_thinking(data, switch),
        logprobs=(top or 0) if logprobs else None,
        tools=tools,
        tool_choice=parse_tool_choice(data.get("tool_choice"), tools),
        parallel_tool_calls=True if parallel is None else parallel,
        response_format=parse_response_format(data.get("response_format")),
        template_kwargs=template_kwargs,
    )
    return ChatRequest(messages=messages, options=options, model=model, stream=stream,
                       include_usage=include_usage, stop=_stops(data.get("stop")), n=n,
                       logprobs=logprobs,
                       return_progress=stream and bool(_flag(data, "return_progress")))


def parse_completion_request(body: bytes) -> CompletionRequest:
    """Validate a legacy completions body (one prompt string); ApiError (400) names the field."""
    data = parse_json(body)
    model = _model(data)
    prompts = _prompts(data.get("prompt"))
    n = _integer(data, "n", 1, MAX_N) or 1
    if len(prompts) * n > MAX_N:
        raise bad(f"{len(prompts)} prompts x n={n} answers is more than the {MAX_N} choices one "
                  "request may ask for", "prompt", "invalid_value")
    echo = bool(_flag(data, "echo"))
    if echo and not all(isinstance(p, str) for p in prompts):
        raise bad("'echo' needs text prompts (token-id prompts cannot be echoed)", "echo",
                  "invalid_value")
    for key, default in (("suffix", ""), ("best_of", 1)):
        if data.get(key) not in (None, default):
            raise bad(f"'{key}' is not supported by this server", key, "unsupported_parameter")
    stream, include_usage = _streaming(data)
    logprobs = _integer(data, "logprobs", 0, 5)
    sampling = _sampling(data)
    if sampling["max_tokens"] is None:
        sampling["max_tokens"] = COMPLETION_MAX_TOKENS  # OpenAI's default for this endpoint
    options = ChatOptions(**sampling, thinking=False, logprobs=logprobs)
    return CompletionRequest(prompts=prompts, options=options, model=model, stream=stream,
                             include_usage=include_usage, stop=_stops(data.get("stop")),
                             n=n, echo=echo, logprobs=logprobs,
                             return_progress=stream and bool(_flag(data, "return_progress")))


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _prompts(value: Any) -> tuple[Prompt, ...]:
    """`prompt`: a string, token ids, or a list of either (one choice each)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value:
        if all(_is_token(t) for t in value):
            return (tuple(value),)
        out: list[Prompt] = []
        for p in value:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, list) and p and all(_is_token(t) for t in p):
                out.append(tuple(p))
            else:
                break
        else:
            return tuple(out)
    raise bad("'prompt' must be a string, a list of token ids, or a list of strings or of "
              "token-id lists", "prompt", "invalid_type")


# -- answers ------------------------------------------------------------------------------------


def prompt_progress(progress: PromptProgress, stats: Stats) -> dict[str, int]:
    """llama.cpp's `prompt_progress` object: the whole prompt (`total`), the part reused from
    the cache (`cache`), the tokens in the model's state so far (`processed`, the cached ones
    included) and the milliseconds since the prompt's evaluation began (`time_ms`)."""
    return {"total": stats.prompt_length, "cache": stats.reused_tokens,
            "processed": stats.reused_tokens + progress.done,
            "time_ms": int(progress.seconds * 1000)}


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


def combined(stats: list[Stats]) -> Stats:
    """The figures of a request's n answers: the first one's prompt, every answer's tokens."""
    first = stats[0]
    return replace(first, generated_tokens=sum(s.generated_tokens for s in stats),
                   decode_seconds=sum(s.decode_seconds for s in stats))


def seeded(options: ChatOptions, index: int) -> ChatOptions:
    """The options of a request's answer number `index` (seeds seed, seed+1, ...)."""
    if index == 0 or options.seed is None:
        return options
    return replace(options, seed=(options.seed + index) % 2**32)


def logprob_entries(lps: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content`: each token with its logprob, bytes and top alternatives."""
    return [{"token": lp.token, "logprob": lp.logprob, "bytes": list(lp.bytes),
             "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)}
                              for t in lp.top]} for lp in lps]


def tool_call_entries(calls: Sequence[ToolCall], start: int = 0) -> list[dict[str, Any]]:
    """OpenAI's `tool_calls` (each with its `index` in the answer, as streaming needs)."""
    return [{"index": start + i, "id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]


def legacy_logprobs(lps: Sequence[TokenLogprob], offset: int = 0) -> dict[str, Any]:
    """The completions endpoint's `logprobs`: tokens, their logprobs, top ones, text offsets."""
    offsets, at = [], offset
    for lp in lps:
        offsets.append(at)
        at += len(lp.token)
    return {"tokens": [lp.token for lp in lps], "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{t.token: t.logprob for t in lp.top} for lp in lps],
            "text_offset": offsets}
