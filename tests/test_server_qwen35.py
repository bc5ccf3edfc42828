"""The server's tool calls, JSON output and logprobs on POCKET's architecture: the tiny
random-weight qwen35moe with a Qwen3.5-like template that has a tools section (calls in Qwen's
XML form) and thinks first, through the real `openai` client on 127.0.0.1. The model writes
nonsense, so what comes back is what the constraints made of it: each call and each JSON
answer is validated with `jsonschema`."""

from __future__ import annotations

import json

import pytest

import tinyqwen35
from serverproc import ServerProcess

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}
FORECAST = {"type": "function", "function": {"name": "get_forecast", "description": "A forecast",
                                             "parameters": CITY}}
NOTE = {"type": "function", "function": {"name": "take_note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string", "maxLength": 30}}, "required": ["text"]}}}
ASK = [{"role": "user", "content": "Forecast for Paris, 3 days?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    home = tmp_path_factory.mktemp("q35tools")
    gguf = tinyqwen35.write_tiny_qwen35moe(home / "tiny-qwen35moe.gguf",
                                           chat_template=tinyqwen35.QWEN35_TOOLS_TEMPLATE)
    srv = ServerProcess(["--model", str(gguf), "--ctx", "2048"], home)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


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


@pytest.mark.parametrize("thinking", [True, False])
def test_forced_call_after_the_reasoning(client, model, thinking):
    r = client.chat.completions.create(
        model=model, messages=ASK, tools=[NOTE, FORECAST], max_tokens=200, seed=1,
        tool_choice={"type": "function", "function": {"name": "get_forecast"}},
        extra_body={"chat_template_kwargs": {"enable_thinking": thinking}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    for call in choice.message.tool_calls:
        valid_call(call, FORECAST)
    assert "<tool_call>" not in (choice.message.content or "")
    assert bool(getattr(choice.message, "reasoning_content", None)) == thinking


def test_required_call_streamed(client, model):
    calls: dict[int, dict] = {}
    finish = None
    for event in client.chat.completions.create(model=model, messages=ASK, tools=[NOTE, FORECAST],
                                                tool_choice="required", max_tokens=200, seed=2,
                                                stream=True):
        for c in event.choices:
            for piece in c.delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += piece.id or ""
                call["name"] += (piece.function.name or "") if piece.function else ""
                call["arguments"] += (piece.function.arguments or "") if piece.function else ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and calls
    for call in calls.values():
        tool = {"get_forecast": FORECAST, "take_note": NOTE}[call["name"]]
        jsonschema.validate(json.loads(call["arguments"]), tool["function"]["parameters"])


def test_a_history_with_calls_results_and_reasoning_round_trips(client, model):
    call_turn = {"role": "assistant", "content": "", "reasoning_content": "I should look it up.",
                 "tool_calls": [{"id": "call_1", "type": "function", "function": {
                     "name": "get_forecast", "arguments": "{\"city\": \"Paris\", \"days\": 3}"}}]}
    history = [*ASK, call_turn, {"role": "tool", "tool_call_id": "call_1", "content": "sun, rain, sun"}]
    ask = dict(model=model, tools=[FORECAST], max_tokens=4, seed=3, extra_body={"ignore_eos": True})
    used = client.chat.completions.create(messages=history, **ask)
    assert used.choices[0].finish_reason in ("length", "tool_calls")
    without = {k: v for k, v in call_turn.items() if k != "reasoning_content"}
    bare = client.chat.completions.create(messages=[history[0], without, history[2]], **ask)
    assert used.usage.prompt_tokens > bare.usage.prompt_tokens  # the reasoning reached the template

    # An earlier turn's reasoning is dropped by the template unless chat_template_kwargs keep it.
    later = [*history, {"role": "assistant", "content": "Sunny, then rain."},
             {"role": "user", "content": "And Lyon?"}]
    dropped = client.chat.completions.create(messages=later, **ask)
    kept = client.chat.completions.create(messages=later, **{**ask, "extra_body": {
        "ignore_eos": True, "chat_template_kwargs": {"preserve_thinking": True}}})
    assert kept.usage.prompt_tokens > dropped.usage.prompt_tokens


def test_json_schema_after_thinking(client, model):
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "A city and a number of days."}],
        max_tokens=200, seed=4, response_format={"type": "json_schema", "json_schema": {
            "name": "trip", "schema": CITY, "strict": True}})
    message = r.choices[0].message
    assert getattr(message, "reasoning_content", None)  # it thought first, unconstrained
    jsonschema.validate(json.loads(message.content), CITY)


def test_logprobs_cover_the_answer_not_the_reasoning(client, model):
    r = client.chat.completions.create(model=model, messages=ASK, max_tokens=24, seed=5,
                                       logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    choice = r.choices[0]
    tokens = choice.logprobs.content
    assert "".join(t.token for t in tokens) == (choice.message.content or "")
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in tokens)
