"""OpenAI's requests: a body validated against its schema (schema.py, published in
/openapi.json), then read into the request model (`ChatRequest`, `CompletionRequest`).

Every field OpenAI documents is either used, accepted and ignored (it changes nothing a client
relies on: `user`, `metadata`, `store` ...), or refused with a 400 that names it where
ignoring it would mislead (legacy `functions`, audio, image parts). Unknown fields are
ignored, as OpenAI-compatible servers do.

Used: `tools`, `tool_choice`, `parallel_tool_calls` (the engine renders the tools with the
model's template and parses its calls), `response_format` (`json_object`, `json_schema`:
enforced by the engine while sampling), `logprobs` / `top_logprobs` (up to 20), `n` (up to
MAX_N answers, seeds seed, seed+1, ...), the sampling fields (`temperature`, `top_p`, `min_p`,
`presence_penalty`, `frequency_penalty`, `logit_bias`, llama.cpp's `top_k`, `repeat_penalty`,
`ignore_eos`). History: assistant turns with `tool_calls` and `reasoning_content`, `tool`
results (each after the assistant turn whose calls it answers); a trailing assistant message
is a prefill the answer continues.

Thinking: on by default (with `serve --think`'s budget); off for a request with
`reasoning_effort: "none"` or `chat_template_kwargs: {"enable_thinking": false}` (the vLLM /
llama.cpp server switch); `thinking_budget_tokens` (llama.cpp's name) and the other
`reasoning_effort` levels set its budget (server/thinking.py); the other
`chat_template_kwargs` reach the template (not those the server sets itself).

The schema checks types, ranges, required fields and reserved keys; this module what a schema
cannot say (the order of messages, a tool_choice naming one of the tools, two tools of one
name, top_logprobs without logprobs, prompts x n).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from pocketchat.documents import Attachment
from pocketchat.engines.types import ChatOptions, Message, ToolCall
from pocketchat.server.protocols.files import from_base64, not_here
from pocketchat.server.protocols.openai.schema import COMPLETION_MAX_TOKENS, COMPONENTS, MAX_N
from pocketchat.server.protocols.validate import Schema, bad, check_strict, parse_json
from pocketchat.server.request import ChatRequest, CompletionRequest, Prompt
from pocketchat.server.thinking import effort_thinking

CHAT = Schema(COMPONENTS, "ChatCompletionRequest")
COMPLETION = Schema(COMPONENTS, "CompletionRequest")
MESSAGES = Schema({**COMPONENTS, "Messages": {"type": "array", "minItems": 1,
                                              "items": {"$ref": "#/components/schemas/Message"}}},
                  "Messages")
TOOLS = Schema({**COMPONENTS, "Tools": {"type": "array", "items":
                                        {"$ref": "#/components/schemas/Tool"}}}, "Tools")
ROLE_NAMES = {"developer": "system"}


def _content(value: Any) -> str:
    """Message content (already valid): a string, or text parts joined."""
    if isinstance(value, list):
        return "".join(part.get("text") or "" for part in value)
    return "" if value is None else value


def _files(m: dict, where: str) -> tuple[Attachment, ...]:
    """The files of a message's `file` parts (a user message's only), read; a `Message`'s
    own attachments (the Python API's, carried by `_as_dict`) as they are."""
    given = m.get("attachments")
    kept = tuple(a for a in given if isinstance(a, Attachment)) \
        if isinstance(given, (list, tuple)) else ()
    parts = m.get("content") if isinstance(m.get("content"), list) else []
    found = [(i, p) for i, p in enumerate(parts) if p["type"] == "file"]
    if found and m["role"] != "user":
        raise not_here(f"{where}.content[{found[0][0]}]", "file part")
    return kept + tuple(from_base64(p["file"]["file_data"], p["file"].get("filename"), None,
                                    f"{where}.content[{i}]") for i, p in found)


def _arguments(value: Any) -> str:
    if value is None:
        return "{}"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _message(m: dict, where: str = "messages[0]") -> Message:
    role = m["role"]
    content = _content(m.get("content"))
    files = _files(m, where)
    if role == "assistant":
        calls = tuple(ToolCall(id=c.get("id") or f"call_{i}", name=c["function"]["name"],
                               arguments=_arguments(c["function"].get("arguments")))
                      for i, c in enumerate(m.get("tool_calls") or ()))
        return Message("assistant", content, tool_calls=calls,
                       reasoning=m.get("reasoning_content") or None)
    if role == "tool":
        return Message("tool", content, tool_call_id=m.get("tool_call_id"), name=m.get("name"))
    return Message(ROLE_NAMES.get(role, role), content,  # type: ignore[arg-type]
                   attachments=files)


def _check_order(messages: tuple[Message, ...], given: list) -> None:
    """A tool result answers a call of the assistant turn just before it (only other results
    between), and the conversation does not end with calls that have no results."""
    calls: tuple[ToolCall, ...] | None = None  # the open assistant turn's calls
    explicit: set[str] = set()
    for i, m in enumerate(messages):
        if m.role == "tool":
            if calls is None:
                raise bad(f"messages[{i}] is a 'tool' result with no assistant tool call before it: "
                          "a tool message follows the assistant message whose 'tool_calls' it "
                          "answers", f"messages[{i}]", "invalid_value")
            if m.tool_call_id and explicit and m.tool_call_id not in explicit:
                raise bad(f"messages[{i}].tool_call_id {json.dumps(m.tool_call_id)} answers none of "
                          f"the calls before it ({', '.join(sorted(explicit))})",
                          f"messages[{i}].tool_call_id", "invalid_value")
            continue
        calls = m.tool_calls if m.role == "assistant" and m.tool_calls else None
        if calls is not None:
            raw = given[i] if i < len(given) and isinstance(given[i], dict) else {}
            explicit = {c["id"] for c in raw.get("tool_calls") or () if c.get("id")}
    last = messages[-1]
    if last.role == "assistant" and last.tool_calls:
        raise bad("the last message is the assistant's tool calls: add their results as 'tool' "
                  "messages before asking for the next answer", f"messages[{len(messages) - 1}]",
                  "invalid_value")


def parse_messages(value: Any) -> tuple[Message, ...]:
    """OpenAI-style messages (dicts, or `Message`s as they are) -> `Message`s, validated."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, Message) for m in value):
        out = tuple(value)
        given: list = []
    else:
        if isinstance(value, tuple):
            value = list(value)
        dicts = [_as_dict(m) for m in value] if isinstance(value, list) else value
        MESSAGES.check(dicts)
        out = tuple(_message(m, f"messages[{i}]") for i, m in enumerate(dicts))
        given = dicts
    _check_order(out, given)
    return out


def _as_dict(m: Any) -> Any:
    """A `Message` among dicts, as the dict it stands for."""
    if not isinstance(m, Message):
        return m
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = [{"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments}}
                           for c in m.tool_calls]
    if m.reasoning:
        d["reasoning_content"] = m.reasoning
    if m.tool_call_id:
        d["tool_call_id"] = m.tool_call_id
    if m.name:
        d["name"] = m.name
    if m.attachments:
        d["attachments"] = m.attachments  # carried as they are (not part of the wire format)
    return d


def parse_tools(value: Any) -> tuple[dict, ...]:
    """`tools`: [{"type": "function", "function": {"name", "description"?, "parameters"?}}]."""
    if value is None:
        return ()
    TOOLS.check(value)
    seen: set[str] = set()
    for i, tool in enumerate(value):
        name = tool["function"]["name"]
        if name in seen:
            raise bad(f"tools[{i}]: two tools are named {json.dumps(name)}",
                      f"tools[{i}].function.name", "invalid_value")
        seen.add(name)
        if tool["function"].get("strict") is True:
            check_strict(tool["function"].get("parameters") or {"type": "object"},
                         f"tools[{i}].function.parameters")
    return tuple(value)


def parse_tool_choice(value: Any, tools: tuple[dict, ...]) -> str | dict:
    """`tool_choice` (already of a valid form) against the tools given."""
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value == "required" and not tools:
            raise bad("'tool_choice' is \"required\" but no 'tools' were given", "tool_choice",
                      "invalid_value")
        return value
    name = value["function"]["name"]
    names = [t["function"]["name"] for t in tools]
    if name not in names:
        raise bad(f"'tool_choice' names the function {json.dumps(name)}, which is not among the "
                  "tools" + (f" ({', '.join(names)})" if names else " (none were given)"),
                  "tool_choice.function.name", "invalid_value")
    return {"type": "function", "function": {"name": name}}


def parse_response_format(value: Any) -> dict | None:
    """`response_format` (already valid): None for text, else what the engine enforces; a
    json_schema without `schema` is any JSON object (as json_object)."""
    if value is None or value["type"] == "text":
        return None
    if value["type"] == "json_object":
        return {"type": "json_object"}
    spec = {k: v for k, v in value["json_schema"].items() if v is not None}
    if spec.get("strict") is True and "schema" in spec:
        check_strict(spec["schema"], "response_format.json_schema.schema")
    return {"type": "json_schema", "json_schema": spec}


def parse_logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """`logit_bias` (already valid): {"token id": bias} -> ((id, bias), ...)."""
    return tuple((int(k), float(v)) for k, v in (value or {}).items())


def _int(data: dict, key: str) -> int | None:
    value = data.get(key)
    return None if value is None else int(value)


def _float(data: dict, key: str) -> float | None:
    value = data.get(key)
    return None if value is None else float(value)


def _sampling(data: dict) -> dict[str, Any]:
    """The ChatOptions fields both endpoints share (values already valid)."""
    max_tokens = _int(data, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _int(data, "max_tokens")
    seed = _int(data, "seed")
    return dict(
        temperature=_float(data, "temperature"), top_p=_float(data, "top_p"),
        top_k=_int(data, "top_k"), min_p=_float(data, "min_p"),
        repeat_penalty=_float(data, "repeat_penalty"),
        presence_penalty=_float(data, "presence_penalty"),
        frequency_penalty=_float(data, "frequency_penalty"),
        max_tokens=max_tokens, seed=None if seed is None else seed % 2**32,
        ignore_eos=bool(data.get("ignore_eos")),
        logit_bias=parse_logit_bias(data.get("logit_bias")),
    )


def _thinking(data: dict) -> tuple[bool, int | None, str, dict | None]:
    """(thinking, its budget, what the server's default gives: "all" when the request said
    nothing of thinking, "budget" when it turned it on without a budget, "" when it said
    all; the other chat_template_kwargs) of a request. `enable_thinking: false` wins, then
    `thinking_budget_tokens` (0: off), then `reasoning_effort` (server/thinking.py's table)."""
    kwargs = dict(data.get("chat_template_kwargs") or {})
    switch = kwargs.pop("enable_thinking", None)
    budget, effort = data.get("thinking_budget_tokens"), data.get("reasoning_effort")
    if switch is False:
        return False, None, "", kwargs or None
    if budget is not None:
        return budget > 0, int(budget) or None, "", kwargs or None
    if effort is not None:
        on, n = effort_thinking(effort)
        return on, n, "", kwargs or None
    return True, None, "budget" if switch else "all", kwargs or None


def _streaming(data: dict) -> tuple[bool, bool]:
    """(stream, stream_options.include_usage)."""
    return bool(data.get("stream")), bool((data.get("stream_options") or {}).get("include_usage"))


def chat_request(data: dict) -> ChatRequest:
    """A chat-completions request from its JSON object; ApiError (400) names the first bad field."""
    CHAT.check(data)
    messages = parse_messages(data["messages"])
    logprobs = bool(data.get("logprobs"))
    top = _int(data, "top_logprobs")
    if top is not None and not logprobs:
        raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
    tools = parse_tools(data.get("tools"))
    thinking, budget, from_server, template_kwargs = _thinking(data)
    stream, include_usage = _streaming(data)
    parallel = data.get("parallel_tool_calls")
    options = ChatOptions(
        **_sampling(data), thinking=thinking, thinking_budget=budget,
        logprobs=(top or 0) if logprobs else None,
        tools=tools, tool_choice=parse_tool_choice(data.get("tool_choice"), tools),
        parallel_tool_calls=True if parallel is None else parallel,
        response_format=parse_response_format(data.get("response_format")),
        template_kwargs=template_kwargs,
    )
    return ChatRequest(messages=messages, options=options, model=data.get("model") or None,
                       stream=stream, include_usage=include_usage, stop=_stops(data),
                       n=_int(data, "n") or 1, logprobs=logprobs,
                       return_progress=stream and bool(data.get("return_progress")),
                       thinking_from_server=from_server)


def parse_chat_request(body: bytes) -> ChatRequest:
    """Validate a chat-completions body; ApiError (400) names the first bad field."""
    return chat_request(parse_json(body))


def completion_request(data: dict) -> CompletionRequest:
    """A legacy completions request from its JSON object; ApiError (400) names the field."""
    COMPLETION.check(data)
    prompts = _prompts(data["prompt"])
    n = _int(data, "n") or 1
    if len(prompts) * n > MAX_N:
        raise bad(f"{len(prompts)} prompts x n={n} answers is more than the {MAX_N} choices one "
                  "request may ask for", "prompt", "invalid_value")
    echo = bool(data.get("echo"))
    if echo and not all(isinstance(p, str) for p in prompts):
        raise bad("'echo' needs text prompts (token-id prompts cannot be echoed)", "echo",
                  "invalid_value")
    stream, include_usage = _streaming(data)
    logprobs = _int(data, "logprobs")
    sampling = _sampling(data)
    if sampling["max_tokens"] is None:
        sampling["max_tokens"] = COMPLETION_MAX_TOKENS  # OpenAI's default for this endpoint
    options = ChatOptions(**sampling, thinking=False, logprobs=logprobs)
    return CompletionRequest(prompts=prompts, options=options, model=data.get("model") or None,
                             stream=stream, include_usage=include_usage, stop=_stops(data),
                             n=n, echo=echo, logprobs=logprobs,
                             return_progress=stream and bool(data.get("return_progress")))


def parse_completion_request(body: bytes) -> CompletionRequest:
    """Validate a legacy completions body; ApiError (400) names the field."""
    return completion_request(parse_json(body))


def _stops(data: dict) -> tuple[str, ...]:
    value = data.get("stop")
    stops = [] if value is None else [value] if isinstance(value, str) else value
    return tuple(s for s in stops if s)


def _prompts(value: Any) -> tuple[Prompt, ...]:
    """`prompt` (already valid): a string, token ids, or a list of either (one choice each)."""
    if isinstance(value, str):
        return (value,)
    if not any(isinstance(t, (str, list)) for t in value):
        return (tuple(int(t) for t in value),)
    return tuple(p if isinstance(p, str) else tuple(int(t) for t in p) for p in value)


# -- the Python API's arguments, read as the same requests ----------------------------------

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_tokens", "seed", "min_p",
                   "repeat_penalty", "presence_penalty", "frequency_penalty")


def plain(value: Any, where: str = "") -> Any:
    """A Python value as the JSON it stands for (tuples as lists, mappings as dicts), or a 400
    naming the first part JSON cannot carry (bytes, sets, objects, non-text keys, NaN)."""
    try:
        return _plain(value, where)
    except RecursionError:
        raise bad(f"'{where or 'the request'}' nests too deeply", where or None,
                  "invalid_value") from None


def _plain(value: Any, where: str) -> Any:
    if isinstance(value, Message):
        value = _as_dict(value)
    if value is None or isinstance(value, (bool, str, Attachment)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value  # non-finite numbers: the schema refuses them by name
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise bad(f"'{where}' has the key {key!r:.40}: keys must be strings",
                          where or None, "invalid_type")
            out[key] = _plain(item, f"{where}.{key}" if where else key)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise bad(f"'{where}' must be a JSON value (text, a number, true/false, a list or a mapping), "
              f"got a {type(value).__name__}", where or None, "invalid_type")


def options_fields(options: Any, *, chat: bool = True) -> dict[str, Any]:
    """`ChatOptions` (the Python API's `options=`) as the request fields that give them, so
    that they are validated as a request's are."""
    if not isinstance(options, ChatOptions):
        raise bad(f"'options' must be a ChatOptions, got a {type(options).__name__}", "options",
                  "invalid_type")
    data: dict[str, Any] = {k: getattr(options, k) for k in SAMPLING_FIELDS
                            if getattr(options, k) is not None}
    data["ignore_eos"] = options.ignore_eos
    try:
        data["logit_bias"] = {str(k): b for k, b in options.logit_bias} or None
    except (TypeError, ValueError):
        raise bad("'options.logit_bias' must be (token id, bias) pairs", "logit_bias",
                  "invalid_type") from None
    if not chat:
        data["logprobs"] = options.logprobs
        return data
    if options.logprobs is not None:
        data["logprobs"], data["top_logprobs"] = True, options.logprobs
    kwargs = options.template_kwargs
    data.update(tools=list(options.tools) if isinstance(options.tools, tuple) else options.tools,
                tool_choice=options.tool_choice,
                parallel_tool_calls=options.parallel_tool_calls,
                response_format=options.response_format,
                chat_template_kwargs=({**kwargs, "enable_thinking": options.thinking}
                                      if isinstance(kwargs, Mapping) else
                                      kwargs if kwargs is not None
                                      else {"enable_thinking": options.thinking}))
    if options.thinking and options.thinking_budget is not None:
        data["thinking_budget_tokens"] = options.thinking_budget
    return data
