"""Anthropic's Messages API on the real `pocketchat serve` (127.0.0.1), through the real
`anthropic` SDK (its `messages.stream` helper included) and raw HTTP, on the starter and on the
tiny random-weight qwen35moe with a Qwen3.6-like tools template (calls in Qwen's XML form).
Thinking is off through the protocol's own switch (`thinking: {"type": "disabled"}`, also its
default) unless a test is about thinking. The tiny model writes nonsense: what is checked is
what the constraints make of it (tool inputs and JSON answers validated with `jsonschema`)."""

from __future__ import annotations

import json

import pytest

from support import agentshapes
from support.agentshapes import ALARM, LIGHTS, MODELS, SMALL, agent_model
from support.serverproc import running

anthropic = pytest.importorskip("anthropic")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow
TOOLS = [{"name": "set_alarm", "description": "Set an alarm", "input_schema": ALARM},
         {"name": "lights", "input_schema": LIGHTS}]
ASK = [{"role": "user", "content": "Wake me at 7 with music."}]
OFF = {"type": "disabled"}


@pytest.fixture(scope="module", params=MODELS)
def server(request, tmp_path_factory):
    home = tmp_path_factory.mktemp(f"anthropic-{request.param}")
    spec = agent_model(request.param, home)
    ctx = "8192" if request.param == "starter" else "4096"  # Claude Code's request: 3,300 tokens
    with running(["--model", spec, "--ctx", ctx], home) as srv:
        srv.kind = request.param
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def raw_stream(server, body: dict, path: str = "/v1/messages", headers: dict | None = None):
    with httpx.stream("POST", server.url + path, json=body, timeout=300,
                      headers={"anthropic-version": "2023-06-01", **(headers or {})}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return agentshapes.sse_events(r.iter_lines())


def test_a_text_answer_any_model_name_and_usage_count_tokens_agrees_with(client, server):
    m = client.messages.create(model="claude-opus-4-1", max_tokens=24, messages=ASK, thinking=OFF,
                               extra_body={"temperature": 0})  # greedy: no <think> by chance
    assert m.type == "message" and m.role == "assistant" and m.model == "claude-opus-4-1"
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert [b.type for b in m.content] == ["text"] and isinstance(text_of(m), str)
    assert 0 < m.usage.output_tokens <= 24
    counted = client.messages.count_tokens(model="claude-haiku-4-5", messages=ASK, thinking=OFF)
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == counted.input_tokens > 0
    again = client.messages.create(model="x", max_tokens=4, messages=ASK, thinking=OFF)
    assert again.usage.cache_read_input_tokens > 0  # the same prompt is read from the cache


def test_the_stream_helper_and_the_raw_event_sequence(client, server):
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=24, messages=ASK,
                                thinking=OFF) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == text_of(final) and final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0
    events = raw_stream(server, {"model": "m", "max_tokens": 16, "messages": ASK, "stream": True})
    delta = agentshapes.check_anthropic_stream(events)
    assert delta["usage"]["output_tokens"] > 0


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "set_alarm"}],
                         ids=["any", "tool"])
def test_a_forced_tool_call_validates_against_its_schema(client, choice):
    m = client.messages.create(model="m", max_tokens=300, messages=ASK, tools=TOOLS,
                               tool_choice={**choice, "disable_parallel_tool_use": True}, thinking=OFF)
    assert m.stop_reason == "tool_use"
    calls = [b for b in m.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].id
    schema = {t["name"]: t["input_schema"] for t in TOOLS}[calls[0].name]
    jsonschema.validate(calls[0].input, schema)
    if choice["type"] == "tool":
        assert calls[0].name == "set_alarm"


def test_a_forced_tool_call_streamed(client, server):
    with client.messages.stream(model="m", max_tokens=300, messages=ASK, tools=TOOLS,
                                tool_choice={"type": "tool", "name": "set_alarm"},
                                thinking=OFF) as stream:
        final = stream.get_final_message()
    calls = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and len(calls) >= 1
    for call in calls:
        jsonschema.validate(call.input, ALARM)
    events = raw_stream(server, {"model": "m", "max_tokens": 300, "messages": ASK, "tools": TOOLS,
                                 "tool_choice": {"type": "any"}, "stream": True})
    assert agentshapes.check_anthropic_stream(events)["delta"]["stop_reason"] == "tool_use"
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    partial = "".join(d["delta"]["partial_json"] for n, d in events
                      if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
    assert starts[-1]["type"] == "tool_use" and starts[-1]["input"] == {}
    jsonschema.validate(json.loads(partial), {t["name"]: t["input_schema"] for t in TOOLS}[starts[-1]["name"]])


def history(result) -> list[dict]:
    call = {"type": "tool_use", "id": "toolu_01", "name": "set_alarm",
            "input": {"hour": 7, "mode": "music"}}
    return [*ASK, {"role": "assistant", "content": [{"type": "text", "text": "Setting it."}, call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                                          "content": result}]}]


def test_a_tool_result_round_trip(client):
    short = client.messages.count_tokens(model="m", messages=history("ok"), tools=TOOLS)
    long = client.messages.count_tokens(model="m", messages=history(
        [{"type": "text", "text": "alarm set for 07:00, "}, {"type": "text", "text": "music: on"}]),
        tools=TOOLS)
    assert long.input_tokens > short.input_tokens  # the result's text blocks reached the prompt
    m = client.messages.create(model="m", max_tokens=8, messages=history("alarm set"), tools=TOOLS,
                               thinking=OFF)
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    failed = history("no such alarm clock")
    failed[-1]["content"][0]["is_error"] = True
    assert client.messages.count_tokens(model="m", messages=failed, tools=TOOLS).input_tokens > \
        client.messages.count_tokens(model="m", messages=history("no such alarm clock"),
                                     tools=TOOLS).input_tokens  # said to be an error


def test_json_schema_output(client):
    m = client.messages.create(model="m", max_tokens=200, messages=[
        {"role": "user", "content": "Is it ok? Give a digit too."}], thinking=OFF,
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": SMALL}}})
    jsonschema.validate(json.loads(text_of(m)), SMALL)


def test_stop_sequences_end_the_answer_and_are_named(client, server):
    if server.kind != "starter":
        pytest.skip("the tiny model's random text may hold no space")
    m = client.messages.create(model="m", max_tokens=40, messages=[
        {"role": "user", "content": "Say hello to the world in a full sentence."}],
        stop_sequences=[" "])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == " " and " " not in text_of(m)


def test_thinking_comes_back_through_its_signature_even_when_omitted(client, server):
    if server.kind != "qwen35moe":
        pytest.skip("the starter does not think")
    # greedy: the random model, sampled, ends its answer at its first token for 3 seeds in 40
    m = client.messages.create(model="m", max_tokens=12, messages=ASK, extra_body={"temperature": 0},
                               thinking={"type": "enabled", "budget_tokens": 1024})
    thought = [b for b in m.content if b.type == "thinking"]
    assert len(thought) == 1 and thought[0].thinking and thought[0].signature
    omitted = client.messages.create(model="m", max_tokens=12, messages=ASK, extra_body={"temperature": 0},
                                     thinking={"type": "adaptive", "display": "omitted"})
    hidden = [b for b in omitted.content if b.type == "thinking"]
    assert len(hidden) == 1 and hidden[0].thinking == "" and hidden[0].signature

    def turn(block: dict | None) -> list[dict]:
        content = ([block] if block else []) + [{"type": "tool_use", "id": "t1", "name": "lights",
                                                 "input": {"on": True}}]
        return [*ASK, {"role": "assistant", "content": content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "on"}]}]

    def count(block: dict | None) -> int:
        return client.messages.count_tokens(model="m", messages=turn(block), tools=TOOLS,
                                            thinking={"type": "enabled", "budget_tokens": 1024}).input_tokens

    sealed = {"type": "thinking", "thinking": "", "signature": thought[0].signature}
    plain = {"type": "thinking", "thinking": thought[0].thinking, "signature": "elsewhere"}
    assert count(sealed) == count(plain) > count(None)  # the signature carried the thought


def test_errors_in_anthropics_shape(client, server):
    cases = [
        ({"max_tokens": 0, "messages": ASK}, "max_tokens"),
        ({"max_tokens": 8, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]}]},
         "image"),
        ({"max_tokens": 8, "messages": history("ok")[:1] + [history("ok")[2]]}, "tool_result"),
        ({"max_tokens": 8, "messages": ASK, "tool_choice": {"type": "tool", "name": "nope"},
          "tools": TOOLS}, "nope"),
    ]
    for body, word in cases:
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(model="m", **body)
        err = info.value.body
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error", err
        assert word in err["error"]["message"], err
    status, body = server.post_json("/v1/messages", {"model": "m", "messages": ASK})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


def test_the_key_as_x_api_key_and_refusals_in_anthropics_shape(tmp_path):
    with running(["--model", "starter", "--ctx", "1024", "--api-key", "s3cret"], tmp_path) as srv:
        wrong = anthropic.Anthropic(base_url=srv.url, api_key="nope", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as info:
            wrong.messages.create(model="m", max_tokens=4, messages=ASK)
        assert info.value.body["type"] == "error"
        assert info.value.body["error"]["type"] == "authentication_error"
        right = anthropic.Anthropic(base_url=srv.url, api_key="s3cret", max_retries=0)
        assert right.messages.create(model="m", max_tokens=4, messages=ASK).usage.output_tokens > 0


def test_paths_without_v1_and_the_models_list(server):
    status, body = server.post_json("/messages", {"model": "any", "max_tokens": 4, "messages": ASK})
    assert status == 200 and body["type"] == "message"
    status, count = server.post_json("/messages/count_tokens", {"model": "any", "messages": ASK})
    assert status == 200 and count["input_tokens"] > 0
    status, models = server.get("/models")
    assert status == 200 and len(models["data"]) == 1


def test_claude_codes_first_request_gets_a_well_formed_stream(server):
    """The recorded shape (support/agentshapes.py), with Claude Code's headers and path."""
    if server.kind != "starter":
        pytest.skip("12 large tools do not fit the tiny model's byte-level 4,096-token context")
    headers = {"x-api-key": "unused", "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
               "user-agent": "claude-cli/2.1.332 (external, cli)"}
    body = agentshapes.claude_code_request()
    events = agentshapes.check_anthropic_stream(raw_stream(server, body, "/v1/messages?beta=true", headers))
    assert events["usage"]["output_tokens"] > 0
    small = {**body, "model": "claude-haiku-4-5-20251001", "stream": False, "max_tokens": 64,
             "tools": [], "thinking": {"type": "disabled"}}
    status, answer = server.post_json("/v1/messages?beta=true", small, headers)
    assert status == 200 and answer["model"] == "claude-haiku-4-5-20251001"
