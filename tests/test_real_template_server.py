"""POCKET's own chat template (Qwen3.6's real one, `support/templates`) through the real
`pocketchat serve` on the tiny `qwen35moe`, with the real `openai` and `anthropic` clients:

- a tool forced with thinking on gives a tool call in all three protocols once the budget
  closes the thought (the grammar takes over after the closing's blank line), and a JSON
  format the same;
- the shared system prompt is kept: a first request writes the disk tier, a restarted
  server reads only what follows the agent prompt (tools as system text), and requests that
  share a system prompt without tools share it;
- the template's refusal is a 400 in its own words; count_tokens counts a prompt over the
  context; each request is one line in the server's output.

The model writes nonsense and never ends a thought by itself: what comes back is what the
constraints and the budget made of it.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from support import tinyqwen35
from support.serverproc import running

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow

LIGHTS = {"type": "function", "function": {
    "name": "lights", "description": "Switch the lights",
    "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}},
                   "required": ["on"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "Lights on, please."}]
SMALL = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
         "additionalProperties": False}


def agent_tools(n: int = 11) -> list[dict]:
    """An agent's tool list: about 6,000 tokens of system text with the byte-level vocabulary."""
    tools = []
    for i in range(n):
        props = {f"arg{j}": {"type": "string", "description": f"The {j}th input of tool {i}, "
                             "a path or a short piece of text the tool reads."} for j in range(2)}
        tools.append({"type": "function", "function": {
            "name": f"tool_{i}", "description": f"Tool number {i} of the agent: it reads files, "
            "runs commands and writes what it found back to the conversation.",
            "parameters": {"type": "object", "properties": props, "required": ["arg0"]}}})
    return tools


AGENT_SYSTEM = "You are a coding agent in a terminal. Be brief; use the tools to look first. " * 4
SHARED_SYSTEM = "You answer questions about a bakery's orders in one short line each. " * 7


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    return tinyqwen35.write_tiny_qwen35moe(tmp_path_factory.mktemp("q36real") / "q36.gguf",
                                           chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE)


def serve(gguf, home, *extra: str):
    return running(["--model", str(gguf), "--ctx", "8192", "--threads", "1", "--parallel", "1",
                    "--draft", "off", *extra], home)


@pytest.fixture(scope="module")
def server(gguf, tmp_path_factory):
    with serve(gguf, tmp_path_factory.mktemp("q36srv")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_a_forced_call_after_the_budget_closes_the_thought_in_chat_completions(client):
    r = client.chat.completions.create(model="pocket", messages=ASK, tools=[LIGHTS],
                                       tool_choice="required", reasoning_effort="minimal",
                                       max_tokens=300, seed=1)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", (choice.finish_reason, choice.message)
    (call,) = choice.message.tool_calls
    assert call.function.name == "lights"
    jsonschema.validate(json.loads(call.function.arguments), LIGHTS["function"]["parameters"])
    assert getattr(choice.message, "reasoning_content", None) or r.model_extra  # it thought first


def test_a_forced_call_after_the_budget_in_responses(client):
    r = client.responses.create(model="pocket", input="Lights on, please.", max_output_tokens=300,
                                tools=[{"type": "function", "name": "lights",
                                        "parameters": LIGHTS["function"]["parameters"]}],
                                tool_choice="required", reasoning={"effort": "minimal"})
    assert r.status == "completed", r.status
    calls = [item for item in r.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["lights"]
    jsonschema.validate(json.loads(calls[0].arguments), LIGHTS["function"]["parameters"])
    assert any(item.type == "reasoning" for item in r.output)


def test_a_forced_call_after_the_budget_in_messages(server):
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    r = client.messages.create(
        model="pocket", max_tokens=300, messages=ASK, tool_choice={"type": "any"},
        thinking={"type": "enabled", "budget_tokens": 64},
        tools=[{"name": "lights", "input_schema": LIGHTS["function"]["parameters"]}])
    assert r.stop_reason == "tool_use", r
    kinds = [b.type for b in r.content]
    assert kinds[0] == "thinking" and kinds[-1] == "tool_use", kinds
    jsonschema.validate(r.content[-1].input, LIGHTS["function"]["parameters"])


def test_a_json_format_after_the_budget_closes_the_thought(client):
    r = client.chat.completions.create(
        model="pocket", messages=ASK, reasoning_effort="minimal", max_tokens=300, seed=2,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "small", "schema": SMALL, "strict": True}})
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    jsonschema.validate(json.loads(choice.message.content), SMALL)


def test_a_conversation_the_template_refuses_is_a_400_in_its_words(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="pocket", max_tokens=4,
                                       messages=[{"role": "assistant", "content": "Hello."}])
    body = err.value.body
    assert "No user query found in messages" in body["message"], body
    assert body["param"] == "messages"


def test_count_tokens_counts_a_prompt_over_the_context(server):
    long = "many words " * 5000  # about 55,000 byte tokens: far over the 8,192 context
    status, body = server.post_json("/v1/messages/count_tokens", {
        "model": "pocket", "messages": [{"role": "user", "content": long}]})
    assert status == 200, body
    assert body["input_tokens"] > len(long) * 0.95 and body["context_window"] == 8192, body
    status, small = server.post_json("/v1/messages/count_tokens", {
        "model": "pocket", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and 0 < small["input_tokens"] < 40 and "context_window" not in small


def test_each_request_is_one_line_in_the_servers_output(server, client):
    client.chat.completions.create(model="pocket", messages=ASK, max_tokens=3,
                                   extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    status, _ = server.post_json("/v1/chat/completions", {"model": "pocket", "messages": "nope"})
    assert status == 400
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = server.log().splitlines()
        ok = [line for line in lines if re.search(
            r"^POST /v1/chat/completions 200 · prompt \d+ .*· generated [1-3] · \d+\.\d\d s$", line)]
        refused = [line for line in lines if re.search(
            r"^POST /v1/chat/completions 400 · \d+\.\d\d s$", line)]
        if ok and refused:
            break
        time.sleep(0.05)
    assert ok and refused, server.log()[-3000:]
    assert "Lights on" not in server.log()  # no prompt text in the log
    assert not [line for line in server.log().splitlines() if line.startswith("GET /health")]


def ask(srv, messages, **extra) -> tuple[int, int]:
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=600)
    r = c.chat.completions.create(model="pocket", max_tokens=2, temperature=0, messages=messages,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}},
                                  **extra)
    return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens




def test_a_restarted_server_reads_only_what_follows_the_agent_prompt(gguf, tmp_path):
    """The issue's figure: a 6,000-token agent prompt at least 90% cached after a restart."""
    tools = agent_tools()
    messages = [{"role": "system", "content": AGENT_SYSTEM},
                {"role": "user", "content": "List the files of this project."}]
    with serve(gguf, tmp_path, "--prompt-cache-disk-mb", "256") as srv:
        total, cached = ask(srv, messages, tools=tools)
        first = srv.disk_after("writes", 1)
    assert total > 5000 and cached == 0 and first["writes"] >= 1, (total, first)
    with serve(gguf, tmp_path, "--prompt-cache-disk-mb", "256") as srv:
        messages[1]["content"] = "Now read the README."
        again, cached = ask(srv, messages, tools=tools)
        second = srv.disk_after("hits", 1)
    assert cached >= 0.9 * again and second["hits"] >= 1, (again, cached, second)


def test_conversations_that_share_a_system_prompt_share_its_state(gguf, tmp_path):
    with serve(gguf, tmp_path) as srv:
        got = [ask(srv, [{"role": "system", "content": SHARED_SYSTEM},
                         {"role": "user", "content": f"Question {i}: is order {i} ready?"}])
               for i in range(3)]
    system_tokens = len(SHARED_SYSTEM.encode())
    assert got[0][1] == 0
    assert all(cached >= system_tokens for _, cached in got[1:]), got


def test_a_forced_call_cut_by_max_tokens_leaves_no_empty_text_block(server):
    """Anthropic refuses an empty text block in a turn sent back; the cut call gives none."""
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    ask = dict(model="pocket", max_tokens=12, messages=ASK, tool_choice={"type": "any"},
               tools=[{"name": "lights", "input_schema": LIGHTS["function"]["parameters"]}])
    r = client.messages.create(**ask)
    assert r.stop_reason == "max_tokens"
    assert not [b for b in r.content if b.type == "text" and not b.text], r.content
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert not [b for b in final.content if b.type == "text" and not b.text], final.content
