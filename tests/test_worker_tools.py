"""A tool-call answer through the worker is settled like any other: after the call is delivered,
the worker evaluates the assistant's turn as the next prompt holds it, so the next turn (the
tool's result) evaluates only the result and the generation prompt (the starter, a call forced
with tool_choice "required", the starter's template with pocketchat's tool section)."""

from __future__ import annotations

import pytest

from support.engine_makers import llama_plan
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.engines.worker.parent import WorkerEngine

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

WEATHER = {"type": "function", "function": {
    "name": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string",
                                                             "enum": ["Oslo", "Lima"]}},
                   "required": ["city"], "additionalProperties": False}}}
RESULT = "sunny, 21 degrees, light wind from the west"


def new_part(result: str) -> str:
    """What the turn after a settled call adds: the tool's result and the generation prompt,
    as the starter's template writes them (the `<|im_start|>user\\n` before it is held: an
    answer is settled up to where the next user turn's text goes)."""
    return (f"<tool_response>\n{result}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n")


def test_a_tool_call_answer_is_settled_so_the_next_turn_reads_only_the_result(starter_gguf):
    from pocketchat.engines.llamacpp.load import new_llama

    vocab = new_llama(str(starter_gguf), vocab_only=True, verbose=False)
    expected = len(vocab.tokenize(new_part(RESULT).encode(), add_bos=False, special=True))
    engine = WorkerEngine(llama_plan(2048), starter_gguf)
    try:
        messages = [Message("user", "What is the weather in Oslo?")]
        first = list(engine.chat(messages, ChatOptions(
            tools=(WEATHER,), tool_choice="required", parallel_tool_calls=False,
            max_tokens=100, temperature=0)))
        assert first[-1].finish_reason == "tool_calls"
        calls = tuple(c for chunk in first for c in chunk.tool_calls)
        assert len(calls) == 1 and calls[0].name == "weather"
        messages += [Message("assistant", "".join(c.text for c in first), tool_calls=calls),
                     Message("tool", RESULT, tool_call_id=calls[0].id, name="weather")]
        second = list(engine.chat(messages, ChatOptions(tools=(WEATHER,), max_tokens=4,
                                                        temperature=0)))
        stats = second[-1].stats
        assert second[-1].finish_reason in ("stop", "length")
        assert stats.prepared_tokens > 0, stats  # the call's turn was evaluated after delivery
        assert stats.reused_tokens + stats.prompt_tokens == stats.prompt_length, stats
        # The settled turn ends where any next turn's text may begin: the header's last
        # newline may be left to the next turn (one token at most).
        assert expected <= stats.prompt_tokens <= expected + 1, (
            f"the turn after the call evaluated {stats.prompt_tokens} prompt tokens; the tool "
            f"result and the generation prompt are {expected}: {stats}")
    finally:
        engine.close()
