"""The engine's contract, driven through the real `EngineBase` and token loop over a fake
runtime (`support.script_runtime.ScriptEngine`): why an answer stops, tool calls ending an
answer and settled for the next turn, a prefilled turn continued, cancel at each stage, a long
prompt read in pieces with progress, the thinking split and the thought's budget. The same
contract runs on the real backends in the second lane (test_engine_contract, test_prompt_reuse,
test_thinking_budget, test_mlx_engine)."""

from __future__ import annotations

import json
import threading

import pytest

from pocketchat.engines.answer.loop import CLOSING_LINE
from pocketchat.engines.answer.render import closing_tokens
from pocketchat.engines.types import ChatOptions, Message
from support.script_runtime import ScriptEngine

HI = [Message("user", "hi")]
TOOL = {"type": "function", "function": {"name": "clock", "description": "The time.",
                                         "parameters": {"type": "object", "properties": {}}}}


def run(engine, messages=HI, **options):
    chunks = list(engine.chat(messages, ChatOptions(**options)))
    return "".join(c.text for c in chunks), "".join(c.thinking for c in chunks), chunks


# -- why an answer stops ----------------------------------------------------------------------


def test_an_end_token_stops_the_answer_and_every_token_is_counted():
    eng = ScriptEngine("Hello.")
    text, _, chunks = run(eng)
    final = chunks[-1]
    assert (text, final.finish_reason, final.stats.stop_reason) == ("Hello.", "stop", "stop")
    assert final.stats.generated_tokens == len("Hello.") + 1  # the end token is fed after it
    assert final.stats.prompt_tokens == final.stats.prompt_length - final.stats.reused_tokens


@pytest.mark.parametrize("cap", [1, 3, 6])
def test_max_tokens_caps_the_answer(cap):
    eng = ScriptEngine("Hello there.")
    text, _, chunks = run(eng, max_tokens=cap)
    assert text == "Hello there."[:cap]
    assert (chunks[-1].finish_reason, chunks[-1].stats.stop_reason) == ("length", "cap")


def test_a_full_context_stops_with_context():
    eng = ScriptEngine("x" * 200, n_ctx=64)
    _, _, chunks = run(eng)
    assert (chunks[-1].finish_reason, chunks[-1].stats.stop_reason) == ("length", "context")
    assert chunks[-1].stats.context_used <= 64


def test_ignore_eos_masks_the_end_tokens_through_the_sampling():
    eng = ScriptEngine("ab")
    eng.chat(HI, ChatOptions(ignore_eos=True))  # not started: nothing happens
    from pocketchat.engines.answer.sampling import merge_sampling

    merged = merge_sampling(eng.plan.sampling, ChatOptions(ignore_eos=True), eng.end_tokens)
    assert (0x110000, float("-inf")) in merged.logit_bias


# -- tool calls ----------------------------------------------------------------------------------


def test_a_tool_call_ends_the_answer_and_is_settled_for_the_next_turn():
    call = json.dumps({"name": "clock", "arguments": {}})
    eng = ScriptEngine(f"<tool_call>{call}</tool_call>", n_ctx=4096)  # the tools section is long
    text, _, chunks = run(eng, tools=(TOOL,))
    final = chunks[-1]
    assert final.finish_reason == "tool_calls" and final.stats.stop_reason == "tool_calls"
    calls = [c for chunk in chunks for c in chunk.tool_calls]
    assert [c.name for c in calls] == ["clock"] and not text
    # the next step: the call and its result; only the result and the new turn are evaluated
    follow = [*HI, Message("assistant", "", tool_calls=tuple(calls)),
              Message("tool", "12:00", tool_call_id=calls[0].id, name="clock")]
    eng.script = "Noon."
    history = eng.history_tokens(follow[:2], True, ChatOptions(tools=(TOOL,)))
    whole = eng._encode(eng.render(follow, True, options=ChatOptions(tools=(TOOL,))))
    assert whole[: len(history)] == history
    text, _, chunks = run(eng, follow, tools=(TOOL,))
    assert text == "Noon."
    stats = chunks[-1].stats
    assert stats.prompt_tokens == len(whole) - len(history)
    assert stats.prepared_tokens > 0  # the call was evaluated while the tool ran


# -- a prefilled turn ----------------------------------------------------------------------------


def test_a_trailing_assistant_message_is_continued_not_repeated():
    eng = ScriptEngine(" world.")
    text, _, chunks = run(eng, [*HI, Message("assistant", "Hello")])
    assert text == " world." and chunks[-1].finish_reason == "stop"
    held = "".join(chr(t) for t in eng.cache.tokens if t < 0x110000)
    assert "Hello world." in held


# -- cancel at each stage ------------------------------------------------------------------------


def test_cancel_before_the_answer_starts_is_forgotten():
    eng = ScriptEngine("Hello.")
    eng.cancel()
    assert run(eng)[2][-1].finish_reason == "stop"


def test_cancel_while_a_long_prompt_is_read_stops_at_the_next_piece():
    eng = ScriptEngine("Hello.", n_batch=16)
    long = [Message("user", "w" * 200)]
    chunks = []
    for chunk in eng.chat(long):
        chunks.append(chunk)
        if chunk.progress is not None and chunk.progress.done >= 32:
            eng.cancel()
    assert [c.progress.done for c in chunks if c.progress] == [0, 16, 32]
    assert chunks[-1].finish_reason == "cancelled" and not any(c.text for c in chunks)
    assert len(eng.cache.tokens) == len(eng.ops.fed)  # what was read stays, and is known
    assert run(eng, long)[2][-1].stats.reused_tokens >= 32  # and is reused


def test_cancel_mid_answer_keeps_the_text_so_far():
    eng = ScriptEngine("abcdefghij")
    eng.on_token = lambda n: eng.cancel() if n == 4 else None
    text, _, chunks = run(eng)
    assert chunks[-1].finish_reason == "cancelled" and chunks[-1].stats.stop_reason == "cancelled"
    assert text == "abcd"[: len(text)] and 1 <= len(text) <= 4
    eng.on_token = None
    assert run(eng)[2][-1].finish_reason == "stop"  # the next answer starts clean


def test_cancel_from_another_thread_while_waiting_on_the_runtime():
    eng = ScriptEngine("abcdefghij")
    eng.gate = threading.Event()
    chunks: list = []
    t = threading.Thread(target=lambda: chunks.extend(eng.chat(HI)))
    t.start()
    threading.Timer(0.2, eng.cancel).start()
    threading.Timer(0.3, eng.gate.set).start()
    t.join(10)
    assert chunks[-1].finish_reason == "cancelled"


# -- a long prompt in pieces ---------------------------------------------------------------------


def test_a_long_prompt_is_read_in_pieces_with_progress_between_them():
    eng = ScriptEngine("ok", n_batch=32)
    long = [Message("user", "w" * 100)]
    _, _, chunks = run(eng, long)
    progress = [c.progress for c in chunks if c.progress is not None]
    total = progress[0].total
    assert [p.done for p in progress] == list(range(0, total - 1, 32)) + [total - 1]
    assert all(n <= 32 for _, n in eng.steps)  # no step beyond the batch


# -- thinking ------------------------------------------------------------------------------------


def test_thinking_is_split_from_the_answer_and_ended_by_the_model():
    eng = ScriptEngine("hmm, the sea</think>Blue.", thinking=True)
    text, thought, chunks = run(eng)
    assert (text, thought) == ("Blue.", "hmm, the sea")
    assert chunks[-1].stats.thinking_end == "model"
    assert chunks[-1].stats.thinking_tokens == len("hmm, the sea</think>")  # its tag's tokens too


def test_a_budget_closes_the_thought_and_the_answer_follows():
    eng = ScriptEngine("t" * 300, thinking=True)  # a thought that never ends by itself
    close = closing_tokens(eng, CLOSING_LINE)
    text, thought, chunks = run(eng, thinking_budget=10, max_tokens=10 + len(close) + 5)
    assert thought.startswith("t" * 10) and thought.rstrip().endswith(CLOSING_LINE)
    assert text  # the script's next characters are the answer now
    stats = chunks[-1].stats
    assert stats.thinking_end == "budget" and stats.thinking_tokens == 10 + len(close)


@pytest.mark.parametrize("cap_over", [1, 5, 50])
def test_a_length_cap_leaves_room_for_an_answer(cap_over):
    eng = ScriptEngine("t" * 600, thinking=True)
    close = len(closing_tokens(eng, CLOSING_LINE))
    text, _, chunks = run(eng, max_tokens=close + cap_over)
    assert text, "the thought ate the answer"
    assert chunks[-1].stats.generated_tokens <= close + cap_over + 1


def test_an_end_of_turn_inside_the_thought_closes_it_instead():
    eng = ScriptEngine("short thought", thinking=True)  # then END, still inside the thought
    eng_script_after = "Answer."
    text, thought, chunks = run(eng, max_tokens=200)
    assert thought.startswith("short thought") and CLOSING_LINE in thought
    assert chunks[-1].stats.thinking_end == "model"  # neither a budget nor the user ended it
    del eng_script_after


def test_answer_now_ends_the_thought_at_the_next_token():
    eng = ScriptEngine("t" * 300, thinking=True)
    eng.on_token = lambda n: eng.end_thinking() if n == 5 else None
    text, thought, chunks = run(eng, max_tokens=400)
    assert chunks[-1].stats.thinking_end == "user"
    assert thought.startswith("ttttt") and thought.count("t") <= 6 + CLOSING_LINE.count("t")
    assert text


def test_thinking_off_has_no_thought_and_no_budget():
    eng = ScriptEngine("Hello.", thinking=True)
    text, thought, chunks = run(eng, thinking=False, thinking_budget=3)
    assert (text, thought) == ("Hello.", "")
    assert chunks[-1].stats.thinking_end == "" and chunks[-1].stats.thinking_tokens == 0
