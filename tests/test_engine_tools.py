"""Tool calls, structured output, logprobs and prefills on real models (engine side).

- the starter (SmolLM2-135M, a ChatML template without tools: the fallback, JSON calls);
- the tiny random-weight qwen35moe with a Qwen3.5-like template that renders tools (XML calls);
- the tiny MLX llama (random, and scripted: it thinks "hmm", then answers).
Random weights answer nonsense: constrained decoding is what makes `required` return a valid
call, so every call and every JSON answer is checked with a JSON-schema validator.
"""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from support.engine_makers import llama_plan, make_llama_in_process
from pocketchat.engines.types import ChatOptions, Message, ToolCall
from pocketchat.errors import UnsupportedRequest
from pocketchat.types import LoadPlan
pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "set_alarm", "description": "Set an alarm.",
    "parameters": {"type": "object", "properties": {
        "hour": {"type": "integer", "minimum": 0, "maximum": 23},
        "mode": {"type": "string", "enum": ["beep", "music"]},
        "repeat": {"type": "boolean"}},
        "required": ["hour", "mode", "repeat"], "additionalProperties": False}}}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
SMALL = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                          "n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["ok", "n"], "additionalProperties": False}
ASK = [Message("user", "What is the weather in Paris for the next 3 days?")]


def run(engine, messages, **options):
    chunks = list(engine.chat(messages, ChatOptions(**options)))
    assert all(c.finish_reason is None for c in chunks[:-1])
    return chunks


def text_of(chunks) -> str:
    return "".join(c.text for c in chunks)


def calls_of(chunks) -> list[ToolCall]:
    return [t for c in chunks for t in c.tool_calls]


def schema_of(tool: dict) -> dict:
    return tool["function"]["parameters"]


def assert_valid_call(call: ToolCall, tool: dict) -> None:
    assert call.name == tool["function"]["name"]
    assert call.id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), schema_of(tool))


@pytest.fixture(scope="module")
def starter():
    eng = make_llama_in_process(2048)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def tiny(tiny_qwen35_tools):
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine

    eng = LlamaCppEngine(llama_plan(2048), tiny_qwen35_tools, name="tiny-qwen35moe")
    yield eng
    eng.close()


# -- the starter: a template without tools gets the documented fallback ----------------------

def test_required_returns_a_call_whose_arguments_follow_the_schema(starter):
    chunks = run(starter, ASK, tools=(WEATHER,), tool_choice="required", parallel_tool_calls=False,
                 max_tokens=120, temperature=0)
    final = chunks[-1]
    assert (final.finish_reason, final.stats.stop_reason) == ("tool_calls", "tool_calls")
    calls = calls_of(chunks)
    assert len(calls) == 1
    assert_valid_call(calls[0], WEATHER)
    assert text_of(chunks) == ""  # the call's text is never content


def test_a_named_function_is_the_one_called(starter):
    chunks = run(starter, ASK, tools=(WEATHER, CLOCK), parallel_tool_calls=False,
                 tool_choice={"type": "function", "function": {"name": "set_alarm"}},
                 max_tokens=120, temperature=0.7, seed=3)
    calls = calls_of(chunks)
    assert [c.name for c in calls] == ["set_alarm"]
    assert_valid_call(calls[0], CLOCK)
    assert chunks[-1].finish_reason == "tool_calls"


def test_parallel_calls_each_get_an_id(starter):
    chunks = run(starter, ASK, tools=(WEATHER,), tool_choice="required", max_tokens=160,
                 temperature=0)
    calls = calls_of(chunks)
    assert calls and len({c.id for c in calls}) == len(calls)
    for call in calls:
        assert_valid_call(call, WEATHER)


def test_the_fallback_shows_the_tools_and_auto_never_fails(starter):
    prompt = starter.render(ASK, True, options=ChatOptions(tools=(WEATHER,)))
    assert "<tools>" in prompt and '"get_weather"' in prompt and "<tool_call>" in prompt
    chunks = run(starter, ASK, tools=(WEATHER,), max_tokens=40, temperature=0)
    assert chunks[-1].finish_reason in ("stop", "length", "tool_calls")
    for call in calls_of(chunks):  # whatever it decided, a call it made is a parsed call
        assert call.name and json.loads(call.arguments) is not None


def test_tool_choice_none_shows_no_tools_and_answers_in_text(starter):
    prompt = starter.render(ASK, True, options=ChatOptions(tools=(WEATHER,), tool_choice="none"))
    assert "<tools>" not in prompt and "get_weather" not in prompt
    chunks = run(starter, ASK, tools=(WEATHER,), tool_choice="none", max_tokens=20, temperature=0)
    assert chunks[-1].finish_reason in ("stop", "length") and not calls_of(chunks)
    assert text_of(chunks).strip()


def test_a_tool_result_round_trip(starter):
    call = ToolCall("call_abc", "get_weather", '{"city": "Paris", "days": 3}')
    history = [*ASK, Message("assistant", "", tool_calls=(call,)),
               Message("tool", "Sunny, 24 C all three days.", tool_call_id="call_abc",
                       name="get_weather")]
    prompt = starter.render(history, True, options=ChatOptions(tools=(WEATHER,)))
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}' in prompt
    assert "<tool_response>\nSunny, 24 C all three days.\n</tool_response>" in prompt
    chunks = run(starter, history, tools=(WEATHER,), max_tokens=40, temperature=0)
    assert chunks[-1].finish_reason in ("stop", "length")
    assert text_of(chunks).strip()
    # a history with tool messages is accepted without tools too
    chunks = run(starter, history, max_tokens=8, temperature=0)
    assert chunks[-1].finish_reason in ("stop", "length")


def test_json_schema_output_validates(starter):
    chunks = run(starter, [Message("user", "Give me a person as JSON.")], max_tokens=80,
                 temperature=0.8, seed=5,
                 response_format={"type": "json_schema",
                                  "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    assert chunks[-1].finish_reason == "stop"
    jsonschema.validate(json.loads(text_of(chunks)), PERSON)


def test_json_object_output_is_an_object(starter):
    chunks = run(starter, [Message("user", "List two fruits.")], max_tokens=80, temperature=0,
                 response_format={"type": "json_object"})
    assert isinstance(json.loads(text_of(chunks)), dict)


@pytest.mark.parametrize("options, param", [
    (dict(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "pattern": "(?<=a)b"}}}),
     "response_format.json_schema.schema"),
    (dict(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/gone"}}}}}),
     "response_format.json_schema.schema"),
    (dict(tools=(WEATHER, {"type": "function", "function": {
        "name": "bad", "parameters": {"type": "object", "properties": {
            "a": {"type": "string", "pattern": "(?=x)"}}}}}), tool_choice="required"),
     "tools[1].function.parameters"),
    (dict(tools=(WEATHER,), tool_choice={"type": "function", "function": {"name": "nope"}}),
     "tool_choice"),
    (dict(response_format={"type": "xml"}), "response_format.type"),
])
def test_a_constraint_that_cannot_be_enforced_is_refused_naming_the_part(starter, options, param):
    chunks = run(starter, ASK, max_tokens=5, **options)
    assert len(chunks) == 1 and chunks[0].finish_reason == "error"
    assert isinstance(chunks[0].failure, UnsupportedRequest)
    assert chunks[0].failure.param == param
    ok = run(starter, ASK, max_tokens=3, temperature=0)  # the engine goes on
    assert ok[-1].finish_reason in ("stop", "length")


def test_logprobs_cover_each_chunk_and_list_the_alternatives(starter):
    chunks = run(starter, [Message("user", "Hi")], max_tokens=30, temperature=0, logprobs=3)
    lps = [lp for c in chunks for lp in c.logprobs]
    assert chunks[-1].finish_reason == "stop"  # the end of turn is a token, but not text:
    assert len(lps) == chunks[-1].stats.generated_tokens - 1  # one per token of the text
    for c in chunks:  # each chunk carries its own text's tokens
        assert "".join(lp.token for lp in c.logprobs).lstrip() == c.text.lstrip()
    assert "".join(lp.token for lp in lps).strip() == text_of(chunks).strip()
    for lp in lps:
        assert lp.logprob <= 0 and len(lp.top) == 3
        assert [t.logprob for t in lp.top] == sorted((t.logprob for t in lp.top), reverse=True)
        assert lp.top[0].token == lp.token  # greedy picks the likeliest
        assert lp.top[0].logprob == pytest.approx(lp.logprob)
        assert sum(math.exp(t.logprob) for t in lp.top) <= 1.0 + 1e-4
        assert bytes(lp.bytes).decode("utf-8", errors="replace") == lp.token
    # logprobs=0: the token's own logprob, no alternatives; none: no logprobs at all
    zero = run(starter, [Message("user", "Hi")], max_tokens=4, temperature=0, logprobs=0)
    assert all(lp.top == () for c in zero for lp in c.logprobs) and any(c.logprobs for c in zero)
    off = run(starter, [Message("user", "Hi")], max_tokens=4, temperature=0)
    assert not any(c.logprobs for c in off)


def test_a_trailing_assistant_message_is_continued_not_repeated(starter):
    history = [Message("user", "Count from one to ten in words."), Message("assistant", "One, two,")]
    prompt = starter.render(history, True, options=ChatOptions())
    assert prompt.endswith("<|im_start|>assistant\nOne, two,")  # no end of turn after it
    chunks = run(starter, history, max_tokens=12, temperature=0)
    text = text_of(chunks)
    assert not text.startswith("One") and "three" in text.lower()
    # the next turn reuses what the prefilled answer left in the cache
    follow = [history[0], Message("assistant", "One, two, " + text), Message("user", "Thanks!")]
    again = run(starter, follow, max_tokens=4, temperature=0)
    assert again[-1].stats.reused_tokens > 0


# -- the tiny qwen35moe: a Qwen3.5-like template that renders tools (XML calls) ---------------

def test_qwen_template_renders_tools_calls_and_results(tiny):
    call = ToolCall("call_1", "set_alarm", '{"hour": 7, "mode": "beep", "repeat": true}')
    history = [Message("user", "Wake me at 7."),
               Message("assistant", "", reasoning="An alarm at 7.", tool_calls=(call,)),
               Message("tool", "alarm set", tool_call_id="call_1")]
    prompt = tiny.render(history, True, options=ChatOptions(tools=(CLOCK,)))
    assert "<tools>\n" + json.dumps(CLOCK, ensure_ascii=False) in prompt
    assert ("<tool_call>\n<function=set_alarm>\n<parameter=hour>\n7\n</parameter>\n"
            "<parameter=mode>\nbeep\n</parameter>\n<parameter=repeat>\ntrue\n</parameter>\n"
            "</function>\n</tool_call>") in prompt
    assert "<think>\nAn alarm at 7.\n</think>" in prompt  # reasoning after the last user turn
    assert "<tool_response>\nalarm set\n</tool_response>" in prompt
    older = [*history, Message("assistant", "Done."), Message("user", "Thanks")]
    plain = tiny.render(older, True, options=ChatOptions(tools=(CLOCK,)))
    kept = tiny.render(older, True, options=ChatOptions(
        tools=(CLOCK,), template_kwargs={"preserve_thinking": True}))
    assert "An alarm at 7." not in plain and "An alarm at 7." in kept  # template kwargs pass


@pytest.mark.parametrize("thinking", [False])
def test_random_weights_make_a_valid_xml_call_when_required(tiny, thinking):
    for seed in (1, 2, 3):
        chunks = run(tiny, ASK, tools=(CLOCK,), tool_choice="required", parallel_tool_calls=False,
                     thinking=thinking, max_tokens=200, seed=seed)
        calls = calls_of(chunks)
        assert chunks[-1].finish_reason == "tool_calls", text_of(chunks)
        assert len(calls) == 1
        assert_valid_call(calls[0], CLOCK)
        assert text_of(chunks) == ""


def test_random_weights_call_the_named_function(tiny):
    chunks = run(tiny, ASK, tools=(WEATHER, CLOCK), parallel_tool_calls=False, thinking=False,
                 tool_choice={"type": "function", "function": {"name": "set_alarm"}},
                 max_tokens=200, seed=4)
    assert [c.name for c in calls_of(chunks)] == ["set_alarm"]
    assert_valid_call(calls_of(chunks)[0], CLOCK)


def test_random_weights_write_valid_json_when_asked(tiny):
    for seed in (1, 2):
        chunks = run(tiny, [Message("user", "JSON please")], thinking=False, max_tokens=120,
                     seed=seed, response_format={"type": "json_schema",
                                                 "json_schema": {"name": "s", "schema": SMALL}})
        assert chunks[-1].finish_reason == "stop"
        jsonschema.validate(json.loads(text_of(chunks)), SMALL)


def test_reasoning_gets_no_logprobs_and_is_not_constrained(tiny):
    chunks = run(tiny, ASK, max_tokens=20, seed=1, logprobs=2, ignore_eos=True,
                 response_format={"type": "json_object"})
    thinking = "".join(c.thinking for c in chunks)
    assert thinking and not text_of(chunks)  # still reasoning at the cap
    assert not any(c.logprobs for c in chunks)
    assert not thinking.lstrip().startswith("{")  # the free reasoning, not JSON


# -- MLX ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlx_random():
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import shared_model
    from pocketchat.engines.mlx.engine import MlxEngine

    eng = MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                             n_threads=2, n_threads_batch=2), shared_model(), name="tiny-llama")
    yield eng
    eng.close()


def test_mlx_json_schema_and_required_tool_call(mlx_random):
    chunks = run(mlx_random, [Message("user", "JSON please")], thinking=False, max_tokens=120,
                 seed=1, response_format={"type": "json_schema",
                                          "json_schema": {"name": "s", "schema": SMALL}})
    jsonschema.validate(json.loads(text_of(chunks)), SMALL)
    chunks = run(mlx_random, ASK, tools=(CLOCK,), tool_choice="required", thinking=False,
                 parallel_tool_calls=False, max_tokens=200, seed=2)
    assert chunks[-1].finish_reason == "tool_calls"
    assert_valid_call(calls_of(chunks)[0], CLOCK)


def test_mlx_logprobs(mlx_random):
    chunks = run(mlx_random, [Message("user", "Hi")], thinking=False, max_tokens=8,
                 temperature=0, logprobs=2, ignore_eos=True)
    lps = [lp for c in chunks for lp in c.logprobs]
    assert lps and "".join(lp.token for lp in lps).strip() == text_of(chunks).strip()
    for lp in lps:
        assert len(lp.top) == 2 and lp.top[0].logprob == pytest.approx(lp.logprob, abs=1e-4)


def test_mlx_constraint_starts_after_the_reasoning():
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import shared_model
    from pocketchat.engines.mlx.engine import MlxEngine

    eng = MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=512,
                             n_threads=2, n_threads_batch=2), shared_model("scripted"))
    try:  # the scripted model thinks "hmm" (free), then has to write a boolean
        chunks = run(eng, [Message("user", "hi")], max_tokens=20, temperature=0,
                     response_format={"type": "json_schema",
                                      "json_schema": {"name": "b", "schema": {"type": "boolean"}}})
        assert "".join(c.thinking for c in chunks) == "hmm"
        assert json.loads(text_of(chunks)) in (True, False)
        assert chunks[-1].finish_reason == "stop"
    finally:
        eng.close()


# -- through the worker ------------------------------------------------------------------------

def test_the_worker_carries_calls_logprobs_and_the_refusal():
    from pocketchat.engines.worker.parent import WorkerEngine
    from pocketchat.store.starter import starter_path

    eng = WorkerEngine(llama_plan(2048), starter_path(), name="starter")
    try:
        chunks = run(eng, ASK, tools=(WEATHER,), tool_choice="required", parallel_tool_calls=False,
                     max_tokens=120, temperature=0, logprobs=1)
        assert chunks[-1].finish_reason == "tool_calls"
        assert_valid_call(calls_of(chunks)[0], WEATHER)
        bad = run(eng, ASK, max_tokens=3, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "(?<=a)b"}}})
        assert isinstance(bad[-1].failure, UnsupportedRequest)
        assert bad[-1].failure.param == "response_format.json_schema.schema"
    finally:
        eng.close()
