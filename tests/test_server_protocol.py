"""The OpenAI wire format without a model: requests -> ChatOptions/Messages, one answer's
pieces (stop sequences, tool calls, logprobs), the CORS policy."""

from __future__ import annotations

import json

import pytest

from pocketchat.engines.types import Chunk, Message, Stats, TokenLogprob, ToolCall, TopLogprob
from pocketchat.errors import ApiError, UsageError
from pocketchat.server.cors import CorsPolicy, parse_origin
from pocketchat.server.protocols.openai.encode import (legacy_logprobs, logprob_entries,
                                                       tool_call_entries)
from pocketchat.server.protocols.openai.requests import (parse_chat_request,
                                                         parse_completion_request)
from pocketchat.server.request import combined, seeded
from pocketchat.server.reply import Reply

HI = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def chat(**fields) -> "object":
    return parse_chat_request(json.dumps({"messages": HI, **fields}).encode())


def refusal(**fields) -> ApiError:
    with pytest.raises(ApiError) as info:
        chat(**fields)
    assert info.value.status == 400
    return info.value


def test_tools_and_tool_choice_reach_the_options():
    r = chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
             parallel_tool_calls=False)
    assert r.options.tools == (WEATHER,)
    assert r.options.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert r.options.parallel_tool_calls is False
    assert chat(tools=[WEATHER]).options.tool_choice == "auto"
    assert chat(tools=[WEATHER], tool_choice="none").options.tool_choice == "none"
    assert chat(tool_choice="none").options.tools == ()  # "none" without tools is fine


@pytest.mark.parametrize("fields, param", [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": "sometimes", "tools": [WEATHER]}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "tools[0].function.parameters"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"logit_bias": {"x": 2}}, "logit_bias"), ({"logit_bias": {"1": 101}}, "logit_bias"),
    ({"logit_bias": [1]}, "logit_bias"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"n": 0}, "n"), ({"n": 17}, "n"),
    ({"min_p": 1.5}, "min_p"), ({"presence_penalty": 3}, "presence_penalty"),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "chat_template_kwargs.enable_thinking"),
])
def test_a_bad_field_is_a_400_naming_it(fields, param):
    assert refusal(**fields).param == param


def test_response_format_logprobs_sampling_and_template_kwargs_are_passed_on():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False}
    r = chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                     "strict": True}},
             logprobs=True, top_logprobs=5, min_p=0.05, repeat_penalty=1.1, presence_penalty=0.5,
             frequency_penalty=-0.5, chat_template_kwargs={"enable_thinking": False,
                                                           "preserve_thinking": True})
    o = r.options
    assert o.response_format == {"type": "json_schema",
                                 "json_schema": {"name": "x", "schema": schema, "strict": True}}
    assert (o.logprobs, r.logprobs) == (5, True)
    assert (o.min_p, o.repeat_penalty, o.presence_penalty, o.frequency_penalty) == (0.05, 1.1, 0.5, -0.5)
    assert o.thinking is False and o.template_kwargs == {"preserve_thinking": True}
    assert chat(logprobs=True).options.logprobs == 0
    assert chat(logprobs=False).options.logprobs is None
    assert chat(response_format={"type": "text"}).options.response_format is None
    assert chat(response_format={"type": "json_object"}).options.response_format == {"type": "json_object"}


def test_history_with_tool_calls_results_reasoning_and_a_prefill():
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning_content": "Look it up.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                        {"id": "call_2", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Lyon"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "name": "get_weather",
         "content": [{"type": "text", "text": "20 C"}]},
        {"role": "assistant", "content": "Paris: "},
    ]
    r = parse_chat_request(json.dumps({"messages": messages}).encode())
    assert [m.role for m in r.messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    call = r.messages[2]
    assert call.reasoning == "Look it up." and call.content == ""
    assert call.tool_calls == (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
                               ToolCall("call_2", "get_weather", '{"city": "Lyon"}'))
    assert r.messages[3] == Message("tool", "18 C", tool_call_id="call_1")
    assert r.messages[4] == Message("tool", "20 C", tool_call_id="call_2", name="get_weather")
    assert r.messages[5] == Message("assistant", "Paris: ")  # the prefill, continued
    with pytest.raises(ApiError) as info:
        parse_chat_request(json.dumps({"messages": messages[:3]}).encode())
    assert "add their results" in info.value.message and info.value.param == "messages[2]"


def test_completion_request():
    r = parse_completion_request(json.dumps({"prompt": ["Once"], "echo": True, "logprobs": 2,
                                             "n": 2, "stop": "\n"}).encode())
    assert (r.prompts, r.echo, r.logprobs, r.n, r.stop) == (("Once",), True, 2, 2, ("\n",))
    assert r.options.max_tokens == 16 and r.options.thinking is False and r.options.logprobs == 2
    prompts = lambda p: parse_completion_request(json.dumps({"prompt": p}).encode()).prompts  # noqa: E731
    assert prompts([1, 2]) == ((1, 2),) and prompts([[1], "a"]) == ((1,), "a")
    assert prompts(["a", "b"]) == ("a", "b")
    for bad in ({"prompt": "x", "suffix": "y"}, {"prompt": "x", "best_of": 3},
                {"prompt": "x", "logprobs": 6}, {"prompt": []}, {"prompt": [1, "a"]},
                {"prompt": [[1], [-1]]}, {"prompt": [[1]], "echo": True},
                {"prompt": ["a"] * 9, "n": 2}):
        with pytest.raises(ApiError):
            parse_completion_request(json.dumps(bad).encode())


def lp(text: str) -> TokenLogprob:
    return TokenLogprob(text, -0.5, tuple(text.encode()), (TopLogprob(text, -0.5, tuple(text.encode())),))


def test_logprobs_follow_the_text_that_is_sent_and_stop_with_it():
    reply = Reply(["STOP"])
    sent = []
    for text in ["Hello ", "wor", "ld ST", "OP and on"]:
        d = reply.feed(Chunk(text=text, logprobs=(lp(text),)))
        sent.append((d.content, [x.token for x in d.logprobs]))
    reply.feed(Chunk(finish_reason="cancelled"))
    # "ld " is sent at once but its token also holds "ST", which might start the stop: it
    # waits, and goes with the cut (the token the stop began in); the rest is dropped.
    assert sent == [("Hello ", ["Hello "]), ("wor", ["wor"]), ("ld ", []), ("", ["ld ST"])]
    assert reply.text == "Hello world " and reply.finish_reason == "stop"
    assert [x.token for x in reply.logprobs] == ["Hello ", "wor", "ld ST"]


def test_tool_calls_are_collected_and_finish_the_answer():
    reply = Reply()
    call = ToolCall("call_a", "get_weather", '{"city": "Paris"}')
    reply.feed(Chunk(text="Let me check. "))
    d = reply.feed(Chunk(tool_calls=(call,), finish_reason="tool_calls"))
    assert d.tool_calls == (call,) and reply.tool_calls == [call]
    assert reply.text == "Let me check. " and reply.finish_reason == "tool_calls"
    assert tool_call_entries([call], 1) == [{"index": 1, "id": "call_a", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]


def test_logprob_shapes():
    entry = logprob_entries([lp("é")])[0]
    assert entry == {"token": "é", "logprob": -0.5, "bytes": [195, 169],
                     "top_logprobs": [{"token": "é", "logprob": -0.5, "bytes": [195, 169]}]}
    assert legacy_logprobs([lp("a"), lp("bc")], 3) == {
        "tokens": ["a", "bc"], "token_logprobs": [-0.5, -0.5],
        "top_logprobs": [{"a": -0.5}, {"bc": -0.5}], "text_offset": [3, 4]}


def test_n_answers_seeds_and_usage():
    r = chat(seed=7, n=3)
    assert [seeded(r.options, i).seed for i in range(3)] == [7, 8, 9]
    assert seeded(chat(n=2).options, 1).seed is None  # unseeded: each answer its own
    total = combined([Stats(prompt_tokens=10, prompt_length=12, generated_tokens=4, decode_seconds=1.0),
                      Stats(prompt_tokens=0, prompt_length=12, generated_tokens=6, decode_seconds=2.0)])
    assert (total.prompt_length, total.generated_tokens, total.decode_seconds) == (12, 10, 3.0)


def test_cors_policy():
    default = CorsPolicy()
    for origin in ("http://localhost:5173", "http://127.0.0.1", "http://127.0.0.2:8080", "https://[::1]:8443",
                   "http://LOCALHOST:3000/"):
        assert default.allows(origin), origin
    for origin in ("https://evil.example", "http://localhost.evil.example", "http://127.0.0.1.nip.io",
                   "null", "file://"):
        assert not default.allows(origin), origin
    app = CorsPolicy(["https://App.Example.com/"])
    assert app.allows("https://app.example.com") and not app.allows("http://app.example.com")
    assert app.header_value("https://app.example.com") == b"https://app.example.com"
    anyone = CorsPolicy(["*"])
    assert anyone.allows("https://evil.example") and anyone.header_value("https://x.y") == b"*"
    for bad in ("app.example.com", "https://app.example.com/path", "ftp://x", "https://"):
        with pytest.raises(UsageError):
            parse_origin(bad)


def test_logit_bias_is_passed_on_as_token_ids():
    assert chat(logit_bias={"42": -100, "7": 2.5}).options.logit_bias == ((42, -100.0), (7, 2.5))
    assert chat().options.logit_bias == ()


# -- strict schemas and sealed thoughts -----------------------------------------

LOOSE = {"type": "object", "properties": {"n": {"type": "integer"}}}
NESTED = {"type": "object", "additionalProperties": False,
          "properties": {"inner": {"type": "object", "properties": {"k": {"type": "string"}}}}}


def test_strict_schemas_need_additional_properties_false_on_every_object():
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": LOOSE, "strict": True}}
    assert refusal(response_format=fmt).param == "response_format.json_schema.schema"
    nested = {"type": "json_schema", "json_schema": {"name": "x", "schema": NESTED, "strict": True}}
    err = refusal(response_format=nested)
    assert err.param == "response_format.json_schema.schema.properties.inner", err.param
    assert "additionalProperties" in err.message
    tool = {"type": "function", "function": {"name": "f", "parameters": LOOSE, "strict": True}}
    assert refusal(tools=[tool]).param == "tools[0].function.parameters"
    # not strict: the same schemas are taken (and enforced as given)
    assert chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": LOOSE}})
    assert chat(tools=[{"type": "function", "function": {"name": "f", "parameters": LOOSE}}])


def test_strict_in_the_responses_api_too():
    from pocketchat.server.protocols.responses.requests import responses_request

    with pytest.raises(ApiError) as err:
        responses_request({"model": "m", "input": "hi", "text": {"format": {
            "type": "json_schema", "name": "x", "schema": LOOSE, "strict": True}}})
    assert err.value.status == 400 and err.value.param == "text.format.schema"
    with pytest.raises(ApiError) as err:
        responses_request({"model": "m", "input": "hi", "tools": [
            {"type": "function", "name": "f", "parameters": LOOSE, "strict": True}]})
    assert err.value.param == "tools[0].parameters"


def test_a_changed_sealed_thought_is_refused_and_another_servers_is_left_out():
    from pocketchat.server.protocols.anthropic.requests import parse_messages_request
    from pocketchat.server.protocols.sealed import seal

    def messages(signature: str) -> bytes:
        return json.dumps({"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "",
                                               "signature": signature},
                                              {"type": "text", "text": "Hello."}]},
            {"role": "user", "content": "again"}]}).encode()

    good = seal("I should greet them.")
    kept = parse_messages_request(messages(good)).chat.messages
    assert kept[1].reasoning == "I should greet them."
    with pytest.raises(ApiError) as err:
        parse_messages_request(messages(good[:-6] + "AAAAAA"))
    assert err.value.status == 400 and err.value.param == "messages[1].content[0].signature"
    assert "was changed" in err.value.message
    other = parse_messages_request(messages("EqQBCkYIBxgCKkBvbm90aGVyIHNlcnZlcg==")).chat.messages
    assert other[1].reasoning is None  # Anthropic's own signature: nothing to read, no error


def test_the_idle_unload_default_follows_the_machine():
    from pocketchat.commands.serve import idle_seconds

    gib = 1024**3
    assert idle_seconds(None, 13 * gib, 24 * gib) == 300  # more than half the RAM: 5 minutes
    assert idle_seconds(None, 2 * gib, 24 * gib) is None  # a small model is kept
    assert idle_seconds(10, 2 * gib, 24 * gib) == 600 and idle_seconds(0, 13 * gib, 24 * gib) is None


def test_ollama_keep_alive_durations():
    from pocketchat.server.protocols.ollama.requests import keep_alive

    assert [keep_alive(v) for v in (None, 0, "5m", "1h30m", "-1", 30, "250ms")] == [
        None, 0.0, 300.0, 5400.0, -1.0, 30.0, 0.25]
    with pytest.raises(ApiError) as err:
        keep_alive("soon")
    assert err.value.param == "keep_alive"
