"""OpenAI's Responses API on the real `pocketchat serve` (127.0.0.1), through the real `openai`
SDK's `responses` API (`create`, `stream`, `retrieve`, `delete`) and raw HTTP, on the starter
and on the tiny random-weight qwen35moe with a Qwen3.6-like tools template. Thinking is off
through the protocol's own switch (`reasoning: {"effort": "none"}`) unless a test is about
thinking. The tiny model writes nonsense: what is checked is what the constraints make of it
(call arguments and JSON answers validated with `jsonschema`)."""

from __future__ import annotations

import json

import pytest

from support import agentshapes
from support.agentshapes import ALARM, LIGHTS, MODELS, SMALL, agent_model
from support.serverproc import running

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow
SET_ALARM = {"type": "function", "name": "set_alarm", "description": "Set an alarm",
             "parameters": ALARM, "strict": True}
LIGHTS_TOOL = {"type": "function", "name": "lights", "strict": True, "parameters": LIGHTS}
ASK = "Wake me at 7 with music."
OFF = {"effort": "none"}


@pytest.fixture(scope="module", params=MODELS)
def server(request, tmp_path_factory):
    home = tmp_path_factory.mktemp(f"responses-{request.param}")
    spec = agent_model(request.param, home)
    with running(["--model", spec, "--ctx", "4096"], home) as srv:
        srv.kind = request.param
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return server.openai()


def raw_stream(server, body: dict, headers: dict | None = None):
    with httpx.stream("POST", server.url + "/v1/responses", json=body, timeout=300,
                      headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return agentshapes.sse_events(r.iter_lines())


def test_a_text_answer_to_any_model_name(client):
    r = client.responses.create(model="gpt-5", input=ASK, max_output_tokens=24, reasoning=OFF)
    assert r.object == "response" and r.model == "gpt-5" and r.status in ("completed", "incomplete")
    assert [o.type for o in r.output] == ["message"] and isinstance(r.output_text, str)
    assert 0 < r.usage.output_tokens <= 24
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    again = client.responses.create(model="o3", input=ASK, max_output_tokens=4, reasoning=OFF)
    assert again.usage.input_tokens == r.usage.input_tokens
    assert again.usage.input_tokens_details.cached_tokens > 0  # the same prompt, from the cache


def test_the_stream_helper_and_the_raw_event_sequence(client, server):
    with client.responses.stream(model="m", input=ASK, max_output_tokens=24, reasoning=OFF) as stream:
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    final = events[-1].response  # the cap cuts the starter's answer: response.incomplete, as
    # OpenAI ends it (the SDK's get_final_response() waits for response.completed alone)
    assert events[-1].type == {"incomplete": "response.incomplete"}.get(final.status,
                                                                      "response.completed")
    assert "".join(deltas) == final.output_text and final.usage.output_tokens > 0
    events = raw_stream(server, {"model": "m", "input": ASK, "max_output_tokens": 16,
                                 "reasoning": OFF, "stream": True})
    final = agentshapes.check_responses_stream(events)
    names = [n for n, _ in events]
    assert names[2:4] == ["response.output_item.added", "response.content_part.added"], names
    assert final["usage"]["output_tokens"] > 0


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "set_alarm"}],
                         ids=["required", "named"])
def test_a_forced_function_call_validates_against_its_schema(client, choice):
    r = client.responses.create(model="m", input=ASK, tools=[LIGHTS_TOOL, SET_ALARM], tool_choice=choice,
                                parallel_tool_calls=False, max_output_tokens=300, reasoning=OFF)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1 and calls[0].call_id
    tool = {"set_alarm": SET_ALARM, "lights": LIGHTS_TOOL}[calls[0].name]
    jsonschema.validate(json.loads(calls[0].arguments), tool["parameters"])
    if isinstance(choice, dict):
        assert calls[0].name == "set_alarm"


def test_a_forced_function_call_streamed(client, server):
    with client.responses.stream(model="m", input=ASK, tools=[SET_ALARM], tool_choice="required",
                                 max_output_tokens=300, reasoning=OFF) as stream:
        final = stream.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), ALARM)
    events = raw_stream(server, {"model": "m", "input": ASK, "tools": [SET_ALARM], "stream": True,
                                 "tool_choice": "required", "max_output_tokens": 300,
                                 "reasoning": OFF})
    agentshapes.check_responses_stream(events)
    args = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    jsonschema.validate(json.loads(args.split("}{")[0] + ("}" if "}{" in args else "")), ALARM)


def history(output) -> list:
    return [{"role": "user", "content": ASK},
            {"type": "function_call", "call_id": "call_1", "name": "set_alarm",
             "arguments": json.dumps({"hour": 7, "mode": "music"})},
            {"type": "function_call_output", "call_id": "call_1", "output": output}]


def test_a_function_call_output_round_trip(client):
    short = client.responses.create(model="m", input=history("ok"), tools=[SET_ALARM],
                                    max_output_tokens=4, reasoning=OFF)
    long = client.responses.create(model="m", tools=[SET_ALARM], max_output_tokens=4, reasoning=OFF,
                                   input=history([{"type": "input_text", "text": "alarm set for 07:00, "},
                                                  {"type": "input_text", "text": "music: on"}]))
    assert long.usage.input_tokens > short.usage.input_tokens  # the output reached the prompt
    assert short.status in ("completed", "incomplete")


def test_json_schema_and_json_object_output(client):
    r = client.responses.create(model="m", input="Is it ok? Give a digit too.", reasoning=OFF,
                                max_output_tokens=200, text={"format": {
                                    "type": "json_schema", "name": "small", "schema": SMALL,
                                    "strict": True}})
    jsonschema.validate(json.loads(r.output_text), SMALL)
    r = client.responses.create(model="m", input="Answer in JSON.", reasoning=OFF,
                                max_output_tokens=200, text={"format": {"type": "json_object"}})
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)


def test_stored_responses_continue_with_previous_response_id(client, server):
    first = client.responses.create(model="m", input=ASK, max_output_tokens=12, reasoning=OFF,
                                    instructions="Be brief.")
    got = client.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text
    # `instructions` are not carried over by previous_response_id (OpenAI's rule): a client sends
    # them again, as Codex does each turn; then the stored turn is a prefix of the new prompt
    follow = client.responses.create(model="m", input="And at 8?", previous_response_id=first.id,
                                     max_output_tokens=4, reasoning=OFF, instructions="Be brief.")
    assert follow.previous_response_id == first.id
    # the stored turn came first: its input and its answer
    assert follow.usage.input_tokens >= first.usage.input_tokens + first.usage.output_tokens
    if server.kind == "starter":  # (the hybrid model reuses only from a checkpoint it kept)
        assert follow.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 8
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve(first.id)
    assert info.value.body["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="m", input="x", previous_response_id=first.id, max_output_tokens=4)
    assert info.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model="m", input=ASK, max_output_tokens=4, store=False,
                                       reasoning=OFF)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_reasoning_comes_back_through_encrypted_content(client, server):
    if server.kind != "qwen35moe":
        pytest.skip("the starter does not think")
    # greedy: the random model, sampled, may end its answer at its first token (no reasoning)
    r = client.responses.create(model="m", input=ASK, max_output_tokens=12, temperature=0,
                                include=["reasoning.encrypted_content"], reasoning={"effort": "high"})
    reasoning = [o for o in r.output if o.type == "reasoning"]
    assert len(reasoning) == 1 and reasoning[0].encrypted_content
    thought = "".join(c.text for c in reasoning[0].content)
    assert thought
    plain = client.responses.create(model="m", input=ASK, max_output_tokens=4, reasoning={"effort": "low"})
    assert all(not getattr(o, "encrypted_content", None) for o in plain.output)

    def tokens(item: dict | None) -> int:
        items = history("on")
        items[1:1] = [item] if item else []
        return client.responses.create(model="m", input=items, tools=[SET_ALARM], max_output_tokens=1,
                                       reasoning={"effort": "high"}).usage.input_tokens

    sealed = {"type": "reasoning", "id": "rs_1", "summary": [],
              "encrypted_content": reasoning[0].encrypted_content}
    shown = {"type": "reasoning", "id": "rs_2", "summary": [],
             "content": [{"type": "reasoning_text", "text": thought}]}
    assert tokens(sealed) == tokens(shown) > tokens(None)  # the sealed thought reached the template


def test_hosted_tools_are_left_out_and_said_so(client):
    r = client.responses.create(model="m", input=ASK, max_output_tokens=8, reasoning=OFF,
                                tools=[SET_ALARM, {"type": "web_search"}, {"type": "file_search",
                                                                           "vector_store_ids": ["vs"]}])
    extra = r.model_extra
    assert extra["ignored_tools"] == ["web_search", "file_search"] and "web_search" in extra["notes"][0]


def test_errors_in_openais_shape(client, server):
    cases = [
        (dict(input=ASK, max_output_tokens=0), "max_output_tokens"),
        (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
         "input[0].content[0].type"),
        (dict(input=history("ok")[:1] + [history("ok")[2]]), "input[1]"),
        (dict(input=ASK, tools=[SET_ALARM], tool_choice={"type": "function", "name": "nope"}),
         "tool_choice.name"),
    ]
    for kwargs, param in cases:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="m", **kwargs)
        assert info.value.body["param"] == param and info.value.body["message"], info.value.body
    status, body = server.post_json("/v1/responses", {"model": "m"})
    assert status == 400 and body["error"]["param"] == "input"


def test_paths_without_v1(server):
    status, body = server.post_json("/responses", {"model": "any", "input": ASK,
                                                   "max_output_tokens": 4, "reasoning": OFF})
    assert status == 200 and body["object"] == "response"
    assert server.get(f"/responses/{body['id']}")[0] == 200


def test_codexs_first_request_gets_a_well_formed_stream(server):
    """The recorded shape (support/agentshapes.py), with Codex's headers."""
    body = agentshapes.codex_request()
    if server.kind == "qwen35moe":
        body["reasoning"] = {**body["reasoning"], "effort": "none"}  # its reasoning never ends
    events = raw_stream(server, body, {"originator": "codex_exec", "session_id": "0199a1b2",
                                       "authorization": "Bearer unused"})
    final = agentshapes.check_responses_stream(events)
    assert final["status"] in ("completed", "incomplete") and final["store"] is False
    assert final["ignored_tools"] == ["mcp__docs", "web_search"]
    assert final["usage"]["output_tokens"] > 0
