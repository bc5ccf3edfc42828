"""Fitting a conversation into the window: oldest whole turns go, the system prompt stays."""

from __future__ import annotations

import pytest

from pocketchat.errors import ContextOverflow
from pocketchat.engines.answer.context import fit_messages, reply_reserve, split_turns
from pocketchat.engines.types import Message


class Counter:
    """Tokens = words + 4 per message (like a chat template's role markers); counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, messages):
        self.calls += 1
        return sum(len(m.content.split()) + 4 for m in messages)


def conversation(turns, words=10, system=True):
    msgs = [Message("system", "be kind")] if system else []
    for i in range(turns):
        msgs.append(Message("user", " ".join([f"q{i}"] * words)))
        msgs.append(Message("assistant", " ".join([f"a{i}"] * words)))
    msgs.append(Message("user", "last question"))
    return msgs


def test_fits_unchanged():
    msgs = conversation(2)
    got = fit_messages(msgs, Counter(), 1000)
    assert got.messages == tuple(msgs) and got.dropped == 0 and got.tokens == Counter()(msgs)


def test_drops_oldest_whole_turns_and_keeps_system_and_question():
    msgs = conversation(10)  # 1 system (6) + 10 turns x 28 + question (6) = 292 tokens
    got = fit_messages(msgs, Counter(), 100)
    assert got.messages[0] == msgs[0]
    assert got.messages[-1] == msgs[-1]
    assert got.dropped > 0 and got.dropped % 2 == 0
    assert got.messages[1:] == tuple(msgs[1 + got.dropped:])
    assert got.tokens <= 100
    # the largest suffix that fits: one more turn would not
    one_more = (msgs[0], *msgs[1 + got.dropped - 2:])
    assert Counter()(one_more) > 100
    roles = [m.role for m in got.messages[1:]]
    assert roles[::2] == ["user"] * len(roles[::2])  # still alternating


def test_bisection_is_logarithmic():
    counter = Counter()
    fit_messages(conversation(500), counter, 200)
    assert counter.calls <= 14


def test_system_prompt_dropped_only_when_nothing_else_helps():
    msgs = [Message("system", "word " * 50), Message("user", "a b c")]
    got = fit_messages(msgs, Counter(), 20)
    assert got.messages == (msgs[1],) and got.dropped == 1


def test_question_too_long_raises_context_overflow():
    msgs = [Message("user", "w " * 500)]
    with pytest.raises(ContextOverflow) as info:
        fit_messages(msgs, Counter(), 100)
    assert info.value.prompt_tokens == 504 and info.value.limit == 100
    assert "504 tokens" in info.value.message and info.value.hint


def test_split_turns_handles_a_leading_assistant_greeting():
    msgs = [Message("assistant", "Hello!"), Message("user", "hi"), Message("assistant", "yo")]
    system, turns = split_turns(msgs)
    assert system == [] and turns == [[msgs[0]], [msgs[1], msgs[2]]]


def test_reply_reserve():
    assert reply_reserve(8192, None) == 1024
    assert reply_reserve(8192, 100) == 100
    assert reply_reserve(512, 4000) == 128
