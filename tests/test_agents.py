"""An agent's loop on POCKET's architecture through each protocol the server speaks: the tiny
random-weight qwen35moe with a Qwen3.6-like tools template (tinyqwen35), a forced tool call at
every step, its result fed back, thinking off through each protocol's own switch. From step 2
on, the prompt tokens the engine evaluates are only the new tool result and the generation
prompt: the answer with its calls was settled in the worker after it was sent, and the cache holds it, so it is not read again. The figures are the ones each protocol
reports (`cache_read_input_tokens`, `cached_tokens`) and llama.cpp's own (`timings`)."""

from __future__ import annotations

import json

import pytest

from support import tinyqwen35
from support.serverproc import running

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow
STEPS = 4
LOOKUP = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima"]},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": False}
ASK = "Plan my week: look up the weather in Oslo and in Lima, one call at a time."


def result_text(step: int) -> str:
    return f"step {step}: sunny, 21 degrees, light wind from the west"


def new_part(step: int) -> str:
    """What step `step` + 1 adds after the settled call: the tool result and the generation
    prompt, as the template writes them (thinking off). The turn's header,
    `<|im_start|>user\n`, is not new: the engine settles an answer up to where the next
    user turn's text goes (base.EngineBase.history_tokens)."""
    return ("<tool_response>\n" + result_text(step) + "\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    home = tmp_path_factory.mktemp("agents")
    return tinyqwen35.write_tiny_qwen35moe(home / "tiny-qwen35moe.gguf",
                                           chat_template=tinyqwen35.QWEN35_TOOLS_TEMPLATE)


@pytest.fixture(scope="module")
def server(gguf):
    with running(["--model", str(gguf), "--ctx", "4096"], gguf.parent) as srv:
        yield srv


@pytest.fixture(scope="module")
def new_tokens(gguf):
    """Step N+1's new tokens, counted by llama.cpp's own tokenizer of the model."""
    from pocketchat.engines.llamacpp.load import new_llama

    vocab = new_llama(str(gguf), vocab_only=True, verbose=False)
    return lambda step: len(vocab.tokenize(new_part(step).encode(), add_bos=False, special=True))


def check_steps(rows: list[tuple[int, int, int]], new_tokens) -> None:
    """rows: (evaluated, reused, whole prompt) per step."""
    evaluated, reused, whole = rows[0]
    assert reused == 0 or evaluated > 0
    for step, (evaluated, reused, whole) in enumerate(rows[1:], start=2):
        assert evaluated + reused == whole
        assert evaluated == new_tokens(step - 1), (
            f"step {step} evaluated {evaluated} of {whole} prompt tokens; the new tool result and "
            f"generation prompt are {new_tokens(step - 1)}: {rows}")


def test_messages_agent_loop_reads_only_each_new_tool_result(server, new_tokens):
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    tool = {"name": "weather", "description": "The weather in a city", "input_schema": LOOKUP}
    messages: list[dict] = [{"role": "user", "content": ASK}]
    rows = []
    for step in range(1, STEPS + 1):
        answer = client.messages.create(
            model="claude-sonnet-4-5", max_tokens=300, messages=messages, tools=[tool],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            thinking={"type": "disabled"})
        assert answer.stop_reason == "tool_use"
        calls = [b for b in answer.content if b.type == "tool_use"]
        assert len(calls) == 1
        jsonschema.validate(calls[0].input, LOOKUP)
        u = answer.usage
        rows.append((u.input_tokens, u.cache_read_input_tokens, u.input_tokens + u.cache_read_input_tokens))
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                                   "content": result_text(step)}]}]
    check_steps(rows, new_tokens)


def test_responses_agent_loop_reads_only_each_new_tool_result(server, new_tokens):
    client = server.openai()
    tool = {"type": "function", "name": "weather", "description": "The weather in a city",
            "parameters": LOOKUP, "strict": True}
    items: list = [{"role": "user", "content": ASK}]
    rows = []
    for step in range(1, STEPS + 1):
        r = client.responses.create(model="gpt-5-codex", input=items, tools=[tool],
                                    tool_choice="required", parallel_tool_calls=False, store=False,
                                    reasoning={"effort": "none"}, max_output_tokens=300)
        calls = [o for o in r.output if o.type == "function_call"]
        assert r.status == "completed" and len(calls) == 1
        jsonschema.validate(json.loads(calls[0].arguments), LOOKUP)
        cached = r.usage.input_tokens_details.cached_tokens
        rows.append((r.usage.input_tokens - cached, cached, r.usage.input_tokens))
        items += [o.model_dump(exclude_none=True) for o in r.output]
        items.append({"type": "function_call_output", "call_id": calls[0].call_id,
                      "output": result_text(step)})
    check_steps(rows, new_tokens)


def test_chat_completions_agent_loop_reads_only_each_new_tool_result(server, new_tokens):
    client = server.openai()
    tool = {"type": "function", "function": {"name": "weather", "parameters": LOOKUP}}
    messages: list = [{"role": "user", "content": ASK}]
    rows = []
    for step in range(1, STEPS + 1):
        r = client.chat.completions.create(
            model="anything", messages=messages, tools=[tool], tool_choice="required",
            parallel_tool_calls=False, max_tokens=300,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        message = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and len(message.tool_calls) == 1
        call = message.tool_calls[0]
        jsonschema.validate(json.loads(call.function.arguments), LOOKUP)
        timings = r.model_extra["timings"]  # llama.cpp's own counters
        rows.append((timings["prompt_n"], timings["cache_n"], r.usage.prompt_tokens))
        messages += [message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": result_text(step)}]
    check_steps(rows, new_tokens)
