"""The Anthropic Messages and OpenAI Responses checks of llama.cpp's and vLLM's server tests,
restated against the real `pocketchat serve` on 127.0.0.1 with the real `anthropic` and
`openai` SDKs (raw HTTP only where an SDK will not send the request), on the starter. Only what
tests/test_server_anthropic.py and tests/test_server_responses.py do not already check.

Restated from llama.cpp, tools/server/tests/unit/test_compat_anthropic.py:
test_anthropic_messages_basic (usage fields are integers, no `timings`), _with_system,
_multipart_content, _conversation, test_anthropic_messages_streaming (message_start holds an
empty content list and input_tokens > 0, every delta a text_delta, message_delta's usage, no
`timings`), test_anthropic_count_tokens (only input_tokens), _with_system, _no_max_tokens,
test_anthropic_tool_result_with_text, test_anthropic_tool_result_error,
test_anthropic_streaming_content_block_indices, test_anthropic_temperature, _top_p, _top_k,
test_anthropic_metadata, test_anthropic_missing_messages, test_anthropic_empty_messages,
test_anthropic_vision_format_accepted (a model without vision: a clear error, not a 500) and
test_anthropic_vs_openai_different_response_format.
From llama.cpp, tools/server/tests/unit/test_compat_oai_responses.py:
test_responses_with_text_format (json_schema with a const, json_object, text, and a
json_schema without a schema: a 400), test_responses_with_openai_library (ids `resp_`/`msg_`),
test_responses_stream_with_openai_library (every event names the same item; the deltas make
the completed text).
From vLLM, tests/entrypoints/openai/responses/test_basic.py: test_instructions, test_chat
(a system, user, assistant, user history), test_chat_with_input_type, test_streaming (first
event response.created, last response.completed).
From vLLM, tests/entrypoints/anthropic/test_system_hoist.py (system-role entries inside
`messages` join `system`, after a top-level one, in order; a `tool` role is refused) and
test_content_block_validation.py (a block without its required, non-empty field is a 400;
with it, accepted), unit tests of vLLM's request model restated as what the HTTP API answers.
From vLLM, tests/entrypoints/openai/responses/test_stateful.py:
test_two_responses_with_same_prev_id, test_background_error and test_cancel_completed (this
server has no background mode: `background` is a 400 naming it).
Beyond acceptance, top_k/temperature take effect, and a capped response is `incomplete`.
Checks that need a model that answers sensibly (the weather city, "312") run as their shape
only; image inputs with a vision model and llama.cpp's own telemetry fields have no
counterpart here."""

from __future__ import annotations

import json

import pytest

from support import agentshapes
from support.serverproc import running

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

pytestmark = pytest.mark.slow
HEADERS = {"anthropic-version": "2023-06-01"}
WEATHER_USE = {"role": "assistant", "content": [
    {"type": "tool_use", "id": "tool_1", "name": "get_weather", "input": {"location": "Paris"}}]}
WEATHER_TOOL = {"name": "get_weather", "description": "Get the weather",
                "input_schema": {"type": "object", "properties": {"location": {"type": "string"}},
                                 "required": ["location"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # no drafts: with them a verified batch's logits sum in another order than one token's,
    # so temperature 0 need not repeat itself (docs/server.md), which a test here checks
    with running(["--model", "starter", "--ctx", "2048", "--draft", "off"],
                 tmp_path_factory.mktemp("conf")) as srv:
        yield srv


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def post(server, path: str, body: dict) -> tuple[int, dict]:
    r = httpx.post(server.url + path, json=body, headers=HEADERS, timeout=300)
    return r.status_code, r.json()


def assert_anthropic_error(status: int, body: dict) -> None:
    assert 400 <= status < 500, (status, body)
    assert body["type"] == "error" and body["error"]["type"] and body["error"]["message"], body


# -- Anthropic Messages -------------------------------------------------------------------------

def test_a_message_and_its_usage_are_anthropics_not_openais(server):
    status, body = post(server, "/v1/messages", {
        "model": "test", "max_tokens": 20, "messages": [{"role": "user", "content": "Say hello"}]})
    assert status == 200 and body["type"] == "message" and body["role"] == "assistant"
    assert body["content"] and body["content"][0]["type"] == "text" and "text" in body["content"][0]
    assert body["stop_reason"] in ("end_turn", "max_tokens")
    usage = body["usage"]
    assert all(isinstance(usage[k], int) for k in ("input_tokens", "output_tokens",
                                                    "cache_read_input_tokens"))
    assert usage["output_tokens"] > 0
    assert "timings" not in body and "choices" not in body and "object" not in body
    status, chat = post(server, "/v1/chat/completions", {
        "model": "test", "max_tokens": 20, "messages": [{"role": "user", "content": "Say hello"}]})
    assert status == 200 and chat["object"] == "chat.completion" and "prompt_tokens" in chat["usage"]


@pytest.mark.parametrize("extra", [
    {"system": "You are a helpful assistant."},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is"},
                                               {"type": "text", "text": " the answer?"}]}]},
    {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"},
                  {"role": "user", "content": "How are you?"}]},
    {"extra_body": {"temperature": 0.5}}, {"extra_body": {"top_p": 0.9}},
    {"extra_body": {"top_k": 40}}, {"metadata": {"user_id": "test_user_123"}},
    {"stop_sequences": ["\n", "END"]},
], ids=["system", "multipart", "conversation", "temperature", "top_p", "top_k", "metadata", "stop"])
def test_request_shapes_are_accepted(claude, extra):
    ask = {"model": "test", "max_tokens": 12, "messages": [{"role": "user", "content": "Hello"}]}
    message = claude.messages.create(**{**ask, **extra})
    assert message.type == "message" and message.content and message.usage.output_tokens > 0


def test_tool_results_with_text_and_with_is_error_are_accepted(claude):
    for result in ([{"type": "text", "text": "Here are the results:"},
                    {"type": "tool_result", "tool_use_id": "tool_1", "content": "Sunny, 25°C"}],
                   [{"type": "tool_result", "tool_use_id": "tool_1", "is_error": True,
                     "content": "City not found"}]):
        message = claude.messages.create(model="test", max_tokens=12, tools=[WEATHER_TOOL], messages=[
            {"role": "user", "content": "What's the weather?"}, WEATHER_USE,
            {"role": "user", "content": result}])
        assert message.type == "message" and message.content


def test_the_stream_events_carry_what_the_sdk_reads(server):
    with httpx.stream("POST", server.url + "/v1/messages", headers=HEADERS, timeout=300, json={
            "model": "test", "max_tokens": 12, "stream": True,
            "messages": [{"role": "user", "content": "Say hello"}]}) as r:
        assert r.status_code == 200
        events = [data for _, data in agentshapes.sse_events(r.iter_lines())]
    kinds = [e["type"] for e in events]
    start = events[kinds.index("message_start")]["message"]
    assert start["type"] == "message" and start["role"] == "assistant" and start["content"] == []
    assert start["usage"]["input_tokens"] > 0
    block = events[kinds.index("content_block_start")]
    assert block["index"] == 0 and block["content_block"]["type"] == "text"
    deltas = [e for e in events if e["type"] == "content_block_delta"]
    assert deltas and all(d["delta"]["type"] == "text_delta" and "text" in d["delta"] for d in deltas)
    delta = events[kinds.index("message_delta")]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert delta["usage"]["output_tokens"] > 0
    assert kinds[-1] == "message_stop" and "timings" not in events[-1]


def test_content_block_indices_count_up_and_each_block_stops(claude):
    with claude.messages.stream(model="test", max_tokens=60, tools=[WEATHER_TOOL],
                                tool_choice={"type": "any"},
                                messages=[{"role": "user", "content": "Use the tool"}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == list(range(len(starts))) and sorted(stops) == starts
    assert any(b.type == "tool_use" and b.name == "get_weather" for b in final.content)


def test_count_tokens_needs_no_max_tokens_and_says_only_input_tokens(server, claude):
    status, body = post(server, "/v1/messages/count_tokens", {
        "model": "test", "messages": [{"role": "user", "content": "Hello world"}]})
    assert status == 200 and set(body) == {"input_tokens"} and body["input_tokens"] > 0
    # (the starter's template puts its own system prompt where none is given: compare two)
    short, long = (claude.messages.count_tokens(model="test", system=system, messages=[
        {"role": "user", "content": "Hello"}]).input_tokens
        for system in ("Be brief.", "You are a helpful assistant who answers in full sentences."))
    assert long > short > 0


def test_missing_or_empty_messages_are_errors_in_anthropics_shape(server):
    assert_anthropic_error(*post(server, "/v1/messages", {"model": "test", "max_tokens": 5}))
    # llama.cpp answers an empty list; Anthropic's API refuses it: either way never a 500
    status, body = post(server, "/v1/messages", {"model": "test", "max_tokens": 5, "messages": []})
    if status == 200:
        assert body["type"] == "message"
    else:
        assert_anthropic_error(status, body)


def test_an_image_for_a_model_without_vision_is_a_clear_error(server):
    pixel = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5"
             "ErkJggg==")
    status, body = post(server, "/v1/messages", {"model": "test", "max_tokens": 5, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": pixel}},
            {"type": "text", "text": "What is this?"}]}]})
    assert_anthropic_error(status, body)
    assert "image" in body["error"]["message"].lower()


# -- OpenAI Responses ---------------------------------------------------------------------------

@pytest.mark.parametrize("text_format,ok", [
    ({"type": "json_schema", "name": "test", "schema": {"const": "foooooo"}}, True),
    ({"type": "json_object"}, True),
    ({"type": "text"}, True),
    ({"type": "json_schema", "name": "test"}, False),
])
def test_text_formats(server, text_format, ok):
    r = httpx.post(server.url + "/responses", timeout=300, json={
        "input": "Write an example", "max_output_tokens": 20, "text": {"format": text_format}})
    if not ok:
        assert r.status_code == 400 and r.json()["error"]["message"], r.text
        return
    assert r.status_code == 200, r.text
    message = next(o for o in r.json()["output"] if o["type"] == "message")
    text = message["content"][0]["text"]
    if text_format.get("schema"):
        assert json.loads(text) == "foooooo"
    elif text_format["type"] == "json_object" and r.json()["status"] == "completed":
        assert isinstance(json.loads(text), dict)


def test_ids_instructions_and_a_chat_history(oai):
    r = oai.responses.create(model="gpt-4.1", max_output_tokens=8, temperature=0.8, input=[
        {"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}])
    assert r.id.startswith("resp_") and r.output[0].id.startswith("msg_")
    r = oai.responses.create(model="gpt-4.1", max_output_tokens=8, input="What is 13 * 24?",
                             instructions="Finish the answer with QED.")
    assert r.output[-1].type == "message" and r.output[-1].content[0].type == "output_text"
    r = oai.responses.create(model="gpt-4.1", max_output_tokens=8, input=[
        {"role": "system", "content": "Finish the answer with QED."},
        {"role": "user", "content": "What is 5 * 3?"}, {"role": "assistant", "content": "15. QED."},
        {"role": "user", "content": "Multiply the result by 2."}])
    assert r.output[-1].type == "message"
    r = oai.responses.create(model="gpt-4.1", max_output_tokens=8, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Hello!"}]}])
    assert r.status in ("completed", "incomplete") and r.output_text is not None


def test_a_stream_names_one_item_and_its_deltas_make_the_text(oai):
    stream = oai.responses.create(model="gpt-4.1", max_output_tokens=8, temperature=0.8,
                                  stream=True, input=[{"role": "system", "content": "Book"},
                                                      {"role": "user", "content": "What is the best book"}])
    events = list(stream)
    assert events[0].type == "response.created"
    status = events[-1].response.status  # OpenAI's last event: completed, or cut by the cap
    assert events[-1].type == ("response.incomplete" if status == "incomplete"
                               else "response.completed"), (status, events[-1].type)
    resp_id = events[0].response.id
    assert resp_id.startswith("resp_")
    added = next(e for e in events if e.type == "response.output_item.added")
    msg_id = added.item.id
    assert msg_id.startswith("msg_")
    for e in events:
        if e.type == "response.in_progress":
            assert e.response.id == resp_id
        if e.type in ("response.content_part.added", "response.output_text.delta",
                      "response.output_text.done", "response.content_part.done"):
            assert e.item_id == msg_id
        if e.type == "response.output_item.done":
            assert e.item.id == msg_id
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert done.id == resp_id and done.output[0].id == msg_id and done.output_text == text


def test_sampling_fields_take_effect(claude):
    """Beyond acceptance (llama.cpp's checks): top_k 1 is greedy whatever the seed, and
    temperature 0 repeats itself."""
    ask = dict(model="test", max_tokens=16, messages=[{"role": "user", "content": "Tell me a story"}])

    def text(**extra):
        return "".join(b.text for b in claude.messages.create(**ask, extra_body=extra).content
                       if b.type == "text")

    greedy = text(temperature=0)
    assert text(temperature=0) == greedy
    assert text(temperature=1.0, top_k=1, seed=1) == text(temperature=1.0, top_k=1, seed=2) == greedy


def test_a_capped_response_is_incomplete_and_its_usage_adds_up(oai):
    r = oai.responses.create(model="gpt-4.1", max_output_tokens=4, input="Tell me a long story",
                             extra_body={"ignore_eos": True})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 4 and r.usage.input_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


# -- vLLM, tests/entrypoints/anthropic/test_system_hoist.py and test_content_block_validation.py
# (unit tests of vLLM's request model there; restated as what the HTTP API answers)

def count(claude, messages, system=None) -> int:
    extra = {} if system is None else {"system": system}
    return claude.messages.count_tokens(model="test", messages=messages, **extra).input_tokens


def test_system_messages_inside_messages_are_hoisted_in_order(claude):
    hi = {"role": "user", "content": "Hi"}
    assert count(claude, [{"role": "system", "content": "You are helpful."}, hi]) == count(
        claude, [hi], system="You are helpful.")
    assert count(claude, [{"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
                          hi]) == count(claude, [hi], system="Be terse.")
    top_first = [{"type": "text", "text": "From top level."}, {"type": "text", "text": "From messages."}]
    assert count(claude, [{"role": "system", "content": "From messages."}, hi],
                 system="From top level.") == count(claude, [hi], system=top_first)
    two = count(claude, [{"role": "system", "content": "First."}, hi,
                         {"role": "system", "content": "Second."},
                         {"role": "assistant", "content": "Hello"}])
    assert two == count(claude, [hi, {"role": "assistant", "content": "Hello"}], system=[
        {"type": "text", "text": "First."}, {"type": "text", "text": "Second."}])
    message = claude.messages.create(model="test", max_tokens=4, messages=[
        {"role": "system", "content": "You are helpful."}, hi])
    assert message.type == "message"


@pytest.mark.parametrize("block", [
    {"type": "tool_use", "name": "get_weather", "input": {"city": "NYC"}},
    {"type": "tool_use", "id": "", "name": "get_weather", "input": {"city": "NYC"}},
    {"type": "tool_use", "id": "toolu_01", "input": {"city": "NYC"}},
    {"type": "tool_use", "id": "toolu_01", "name": "", "input": {"city": "NYC"}},
    {"type": "tool_use", "id": "toolu_01", "name": "get_weather"},
    {"type": "text"},
    {"type": "thinking", "signature": "abc"},
    {"type": "redacted_thinking"},
    {"type": "redacted_thinking", "data": ""},
], ids=["use-no-id", "use-empty-id", "use-no-name", "use-empty-name", "use-no-input", "text-no-text",
        "thinking-no-thinking", "redacted-no-data", "redacted-empty-data"])
def test_an_assistant_block_without_its_required_field_is_a_400(claude, block):
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="test", max_tokens=4, messages=[
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": [block]},
            {"role": "user", "content": "Go on"}])
    assert info.value.body["type"] == "error" and info.value.body["error"]["message"]


@pytest.mark.parametrize("block", [
    {"type": "tool_result"}, {"type": "tool_result", "tool_use_id": ""},
    {"type": "image"}, {"type": "text"},
], ids=["result-no-id", "result-empty-id", "image-no-source", "text-no-text"])
def test_a_user_block_without_its_required_field_is_a_400(claude, block):
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="test", max_tokens=4, messages=[
            {"role": "user", "content": [block]}])
    assert info.value.body["type"] == "error" and info.value.body["error"]["message"]


@pytest.mark.parametrize("block", [
    {"type": "tool_use", "id": "toolu_01", "name": "ping", "input": {}},
    {"type": "text", "text": ""},
    {"type": "thinking", "thinking": "hmm"},
    {"type": "thinking", "thinking": ""},
    {"type": "redacted_thinking", "data": "opaque"},
], ids=["use-empty-input", "text-empty", "thinking-no-signature", "thinking-empty", "redacted"])
def test_blocks_with_their_required_fields_are_accepted(claude, block):
    turn = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [block]}]
    if block["type"] == "tool_use":
        turn.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                                                  "content": "pong"}]})
    else:
        turn.append({"role": "user", "content": "Go on"})
    message = claude.messages.create(model="test", max_tokens=4, messages=turn,
                                     tools=[{"name": "ping", "input_schema": {"type": "object"}}])
    assert message.type == "message"


def test_a_tool_role_inside_messages_is_a_400(claude):
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="test", max_tokens=4, messages=[{"role": "tool", "content": "x"}])


# -- vLLM, tests/entrypoints/openai/responses/test_stateful.py --------------------------------
# (test_store and test_previous_response_id are tests/test_server_responses.py's already)

def test_two_responses_may_continue_the_same_one(oai):
    """test_two_responses_with_same_prev_id: each continues the stored one alone."""
    first = oai.responses.create(model="m", input="Hello, my name is John.", max_output_tokens=6,
                                 instructions="Remember names.")
    ask = dict(model="m", input="What is my name again?", previous_response_id=first.id,
               max_output_tokens=4, instructions="Remember names.")
    before = oai.responses.create(**ask)
    oai.responses.create(model="m", input="Actually, my name is Mark.", max_output_tokens=6,
                         previous_response_id=first.id, instructions="Remember names.")
    after = oai.responses.create(**ask)
    assert after.usage.input_tokens == before.usage.input_tokens  # the other branch is not in it
    assert after.usage.input_tokens >= first.usage.input_tokens + first.usage.output_tokens


def test_background_and_cancel_are_refused_in_openais_shape(oai):
    """test_background_error / test_cancel_completed: this server answers in the foreground, so
    `background` is a 400 naming it and a finished response cannot be cancelled."""
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model="m", input="Hi", background=True, store=False)
    assert info.value.body["param"] == "background"
    done = oai.responses.create(model="m", input="Hello", max_output_tokens=4)
    with pytest.raises(openai.APIStatusError) as info:
        oai.responses.cancel(done.id)
    assert 400 <= info.value.status_code < 500 and info.value.body["message"], info.value.body
    assert oai.responses.retrieve(done.id).status == done.status  # untouched
