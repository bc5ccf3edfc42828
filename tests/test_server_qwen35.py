"""The server's tool calls, JSON output and logprobs on POCKET's architecture: the tiny
random-weight qwen35moe with a Qwen3.5-like template that has a tools section (calls in Qwen's
XML form) and thinks first, through the real `openai` client on 127.0.0.1. The model writes
nonsense, so what comes back is what the constraints made of it: each call and each JSON
answer is validated with `jsonschema`. Its reasoning never ends by itself, so the calls and
JSON answers are asked with thinking off; with thinking on, the reasoning comes back
unconstrained and apart."""

from __future__ import annotations

import json

import pytest

from support import tinyqwen35
from support.serverproc import running
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow
ALARM = {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                                          "mode": {"type": "string", "enum": ["beep", "music"]},
                                          "repeat": {"type": "boolean"}},
         "required": ["hour", "mode", "repeat"], "additionalProperties": False}
SET_ALARM = {"type": "function", "function": {"name": "set_alarm", "description": "Set an alarm",
                                              "parameters": ALARM}}
LIGHTS = {"type": "function", "function": {"name": "lights", "parameters": {
    "type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"],
    "additionalProperties": False}}}
SMALL = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                          "n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["ok", "n"], "additionalProperties": False}
OFF = {"chat_template_kwargs": {"enable_thinking": False}}
ASK = [{"role": "user", "content": "Wake me at 7 with music, every day."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    home = tmp_path_factory.mktemp("q35tools")
    gguf = tinyqwen35.write_tiny_qwen35moe(home / "tiny-qwen35moe.gguf",
                                           chat_template=tinyqwen35.QWEN35_TOOLS_TEMPLATE)
    with running(["--model", str(gguf), "--ctx", "2048"], home) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def valid_call(call, tool: dict) -> dict:
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == tool["function"]["name"]
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, tool["function"]["parameters"])
    return args


def test_forced_call_is_valid_xml_made_into_tool_calls(client, model):
    for seed in (1, 2):
        r = client.chat.completions.create(
            model=model, messages=ASK, tools=[LIGHTS, SET_ALARM], max_tokens=200, seed=seed,
            tool_choice={"type": "function", "function": {"name": "set_alarm"}}, extra_body=OFF)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert [valid_call(c, SET_ALARM) for c in choice.message.tool_calls]
        assert choice.message.content is None  # no call text left in the content


def test_required_call_streamed(client, model):
    calls: dict[int, dict] = {}
    finish = None
    for event in client.chat.completions.create(model=model, messages=ASK, tools=[LIGHTS, SET_ALARM],
                                                tool_choice="required", max_tokens=200, seed=2,
                                                parallel_tool_calls=False, stream=True, extra_body=OFF):
        for c in event.choices:
            for piece in c.delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += piece.id or ""
                call["name"] += (piece.function.name or "") if piece.function else ""
                call["arguments"] += (piece.function.arguments or "") if piece.function else ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and len(calls) == 1
    call = calls[0]
    tool = {"set_alarm": SET_ALARM, "lights": LIGHTS}[call["name"]]
    assert call["id"].startswith("call_")
    jsonschema.validate(json.loads(call["arguments"]), tool["function"]["parameters"])


def test_string_keywords_are_enforced_in_the_xml_format_and_the_unenforceable_is_a_400(client, model):
    note = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "properties": {"text": {"type": "string", "maxLength": 10,
                                                  "pattern": "^[a-z ]+$"}},
        "required": ["text"], "additionalProperties": False}}}
    for seed in (1, 2):
        r = client.chat.completions.create(model=model, messages=ASK, tools=[note], max_tokens=200,
                                           seed=seed, tool_choice="required",
                                           parallel_tool_calls=False, extra_body=OFF)
        assert r.choices[0].finish_reason == "tool_calls"
        assert [valid_call(c, note) for c in r.choices[0].message.tool_calls]
    lookbehind = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "properties": {"text": {"type": "string", "pattern": "(?<=a)b"}}}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=ASK, tools=[lookbehind], max_tokens=8,
                                       tool_choice="required", extra_body=OFF)
    assert "look" in info.value.body["message"] and info.value.body["param"], info.value.body


def test_a_history_with_calls_results_and_reasoning_round_trips(client, model):
    call_turn = {"role": "assistant", "content": "", "reasoning_content": "Music at seven.",
                 "tool_calls": [{"id": "call_1", "type": "function", "function": {
                     "name": "set_alarm", "arguments": "{\"hour\": 7, \"mode\": \"music\", \"repeat\": true}"}}]}
    history = [*ASK, call_turn, {"role": "tool", "tool_call_id": "call_1", "content": "alarm set"}]
    ask = dict(model=model, tools=[SET_ALARM], max_tokens=4, seed=3, extra_body={"ignore_eos": True})
    used = client.chat.completions.create(messages=history, **ask)
    assert used.choices[0].finish_reason in ("length", "tool_calls")
    without = {k: v for k, v in call_turn.items() if k != "reasoning_content"}
    bare = client.chat.completions.create(messages=[history[0], without, history[2]], **ask)
    assert used.usage.prompt_tokens > bare.usage.prompt_tokens  # the reasoning reached the template

    # An earlier turn's reasoning is dropped by the template unless chat_template_kwargs keep it.
    later = [*history, {"role": "assistant", "content": "Done."},
             {"role": "user", "content": "And at 8 tomorrow?"}]
    dropped = client.chat.completions.create(messages=later, **ask)
    kept = client.chat.completions.create(messages=later, **{**ask, "extra_body": {
        "ignore_eos": True, "chat_template_kwargs": {"preserve_thinking": True}}})
    assert kept.usage.prompt_tokens > dropped.usage.prompt_tokens


def test_json_schema_output_and_the_reasoning_apart(client, model):
    ask = dict(model=model, messages=[{"role": "user", "content": "JSON please"}],
               response_format={"type": "json_schema", "json_schema": {
                   "name": "small", "schema": SMALL, "strict": True}})
    r = client.chat.completions.create(**ask, max_tokens=120, seed=4, extra_body=OFF)
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), SMALL)
    thinking = client.chat.completions.create(**ask, max_tokens=20, seed=4,
                                              extra_body={"ignore_eos": True}).choices[0]
    reasoning = getattr(thinking.message, "reasoning_content", None)
    assert reasoning and not reasoning.lstrip().startswith("{")  # free reasoning, not JSON
    assert thinking.finish_reason == "length" and not thinking.message.content


def test_logprobs_cover_the_answer_not_the_reasoning(client, model):
    for extra, has_reasoning in (({"ignore_eos": True}, True), ({"ignore_eos": True, **OFF}, False)):
        r = client.chat.completions.create(model=model, messages=ASK, max_tokens=24, seed=5,
                                           logprobs=True, top_logprobs=2, extra_body=extra)
        choice = r.choices[0]
        tokens = choice.logprobs.content
        assert bool(getattr(choice.message, "reasoning_content", None)) == has_reasoning
        assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in tokens)
        if not has_reasoning:  # every generated token is answer text, each with its logprob
            assert len(tokens) == r.usage.completion_tokens == 24
        # Random bytes: a token may hold part of a character, so compare the bytes.
        assert bytes(b for t in tokens for b in t.bytes).decode("utf-8", "replace") == (
            choice.message.content or "")
