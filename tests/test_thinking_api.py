"""The Python API's thinking: `thinking=` False, True or a budget, validated as the server's
request is, and `Session.end_thinking()` ending a streaming thought (the scripted engine, in
process: the real engines' budget is their own tests' concern)."""

from __future__ import annotations

import threading

import pytest
from support.scripted_engine import CLOSING, Reply, ScriptedEngine, tokens

from pocketchat.api import Session
from pocketchat.engines.types import ChatOptions
from pocketchat.errors import ApiError

THOUGHT = " ".join(f"idea{i}" for i in range(300))
ASK = [{"role": "user", "content": "Why is the sky blue?"}]


def options_of(engine: ScriptedEngine) -> ChatOptions:
    return engine.calls[-1][1]


@pytest.mark.parametrize("thinking,on,budget", [
    (False, False, None), (True, True, None), (None, True, None), (64, True, 64), (0, False, None),
])
def test_thinking_takes_off_on_or_a_budget(thinking, on, budget):
    engine = ScriptedEngine([Reply("Scattering.", thinking=THOUGHT)])
    reply = Session(engine).chat(ASK, thinking=thinking)
    opts = options_of(engine)
    assert opts.thinking is on and (opts.thinking_budget if on else None) == budget
    assert reply.text == "Scattering."
    if budget is not None:
        assert reply.stats.thinking_tokens == budget + len(tokens(CLOSING))
        assert reply.stats.thinking_end == "budget" and reply.thinking.endswith(CLOSING)


def test_options_carry_a_budget_and_the_keyword_wins():
    engine = ScriptedEngine([Reply("Scattering.", thinking=THOUGHT)])
    session = Session(engine)
    session.chat(ASK, options=ChatOptions(thinking_budget=100))
    assert options_of(engine).thinking_budget == 100
    session.chat(ASK, options=ChatOptions(thinking_budget=100), thinking=20)
    assert options_of(engine).thinking_budget == 20
    session.chat(ASK, options=ChatOptions(thinking_budget=100), thinking=False)
    assert not options_of(engine).thinking


@pytest.mark.parametrize("bad", [-1, "lots", 2.5, 10**7])
def test_a_bad_thinking_argument_is_an_error_naming_it(bad):
    engine = ScriptedEngine()
    with pytest.raises(ApiError) as err:
        Session(engine).chat(ASK, thinking=bad)
    assert err.value.param == "thinking", err.value.message
    assert "'thinking'" in err.value.message
    assert engine.calls == []


def test_end_thinking_ends_a_streaming_thought_and_the_answer_follows():
    engine = ScriptedEngine([Reply("Scattering.", thinking=THOUGHT, hold_after=10)])
    session = Session(engine)
    chunks = session.chat(ASK, stream=True)

    def answer_now() -> None:  # from another thread, once the thought is under way
        if engine.held.wait(10):
            session.end_thinking()

    helper = threading.Thread(target=answer_now)
    helper.start()
    thought, text, last = "", "", None
    for last in chunks:
        thought += last.thinking
        text += last.text
    helper.join(10)
    assert engine.thoughts_ended == 1
    assert text == "Scattering." and thought.endswith(CLOSING)
    assert last.stats.thinking_end == "user" and last.stats.thinking_tokens == 10 + len(tokens(CLOSING))
