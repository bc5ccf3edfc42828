"""A forced form (a tool call, a JSON schema) survives the thought, however it ends: the budget
closes it, the user ends it (`end_thinking`), or the model writes `</think>` itself. Real
llama.cpp on the tiny `qwen35moe` with POCKET's real Qwen3.6 template, through the Python API
(`Session`) as an embedding app calls it. The tiny model never ends a thought by itself; a
logit bias on `</think>` makes it.

The closing the loop writes ends in a blank line after `</think>`; the grammar used to read
that blank line as the answer's first characters, fail, and mask nothing from then on.
"""

from __future__ import annotations

import json

import pytest

from pocketchat.types import LoadPlan

pytestmark = pytest.mark.slow
jsonschema = pytest.importorskip("jsonschema")

LIGHTS = {"type": "function", "function": {
    "name": "lights", "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}},
                                     "required": ["on"], "additionalProperties": False}}}
SMALL = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
         "additionalProperties": False}
ASK = [{"role": "user", "content": "Lights on, please."}]
FORMAT = {"type": "json_schema", "json_schema": {"name": "small", "schema": SMALL}}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    from support import tinyqwen35
    from pocketchat.api import Session
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine

    path = tinyqwen35.write_tiny_qwen35moe(tmp_path_factory.mktemp("forced") / "q36.gguf",
                                           chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE)
    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                    n_threads=1, n_threads_batch=1)
    with Session(LlamaCppEngine(plan, path, name="tiny-qwen35moe")) as s:
        yield s


def one_call(result) -> dict:
    assert result.finish_reason == "tool_calls", (result.finish_reason, result.text[:200])
    (call,) = result.tool_calls
    assert call.name == "lights"
    args = json.loads(call.arguments)
    jsonschema.validate(args, LIGHTS["function"]["parameters"])
    return args


def test_the_budget_closes_the_thought_and_the_call_follows(session):
    result = session.chat(ASK, tools=[LIGHTS], tool_choice="required", thinking=32,
                          max_tokens=300, seed=3)
    one_call(result)
    assert result.thinking and result.stats.thinking_end == "budget"


def test_the_length_cap_closes_the_thought_and_the_call_follows(session):
    result = session.chat(ASK, tools=[LIGHTS], tool_choice="required", thinking=True,
                          max_tokens=400, seed=4)
    one_call(result)
    # closed to leave the answer its room, or when the model ended its turn inside it
    assert result.stats.thinking_end in ("budget", "model") and result.thinking


def test_a_json_format_follows_a_closed_thought(session):
    result = session.chat(ASK, response_format=FORMAT, thinking=32, max_tokens=300, seed=5)
    assert result.finish_reason == "stop", result
    jsonschema.validate(json.loads(result.text), SMALL)


def test_the_user_ends_the_thought_and_the_call_follows(session):
    stream = session.chat(ASK, tools=[LIGHTS], tool_choice="required", thinking=True,
                          max_tokens=400, seed=6, stream=True)
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        if chunk.thinking and sum(bool(c.thinking) for c in chunks) == 1:
            session.end_thinking()  # as Ctrl+T does, at the first piece of the thought
    final = chunks[-1]
    assert final.stats.thinking_end == "user", final.stats
    assert final.finish_reason == "tool_calls", "".join(c.text for c in chunks)[:200]
    (call,) = [c for ch in chunks for c in ch.tool_calls]
    jsonschema.validate(json.loads(call.arguments), LIGHTS["function"]["parameters"])


def test_the_model_ends_the_thought_itself_and_the_call_follows(session):
    from pocketchat.engines.types import ChatOptions

    close = session.engine._encode("</think>")  # one special token of the tiny vocabulary
    assert len(close) == 1
    options = ChatOptions(logit_bias=((close[0], 40.0),), seed=7)
    result = session.chat(ASK, tools=[LIGHTS], tool_choice="required", thinking=True,
                          max_tokens=300, options=options)
    one_call(result)
    assert result.stats.thinking_end == "model"


def test_a_prefilled_answer_goes_on_with_the_real_template(session):
    """A trailing assistant message is continued (rendered with the template, the answer's
    text after it), here past a closed thought, as a prefill with this template writes it."""
    result = session.chat([*ASK, {"role": "assistant", "content": "Sure: "}], thinking=False,
                          max_tokens=8, seed=8)
    assert result.finish_reason in ("stop", "length") and result.stats.prompt_length > 0
    assert result.stats.generated_tokens > 0
