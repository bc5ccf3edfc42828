"""The streaming <think> splitter: tags split anywhere, nothing lost, nothing delayed."""

from __future__ import annotations

import pytest

from pocketchat.engines.answer.thinking import ThinkSplitter


def split_thinking(text: str, *, in_thinking: bool = False) -> tuple[str, str]:
    """The whole-text version: `(answer, thinking)` of a finished reply."""
    splitter = ThinkSplitter(in_thinking=in_thinking)
    a1, t1 = splitter.feed(text)
    a2, t2 = splitter.flush()
    return a1 + a2, t1 + t2

REPLY = "<think>\nThe user greets me. I greet back.\n</think>\n\nHello! How can I help?"


def run(deltas, **kw):
    s = ThinkSplitter(**kw)
    answer, thinking = [], []
    for d in deltas:
        a, t = s.feed(d)
        answer.append(a)
        thinking.append(t)
    a, t = s.flush()
    return "".join(answer) + a, "".join(thinking) + t


def test_whole_reply():
    assert split_thinking(REPLY) == ("Hello! How can I help?", "The user greets me. I greet back.\n")


@pytest.mark.parametrize("cut", range(1, len(REPLY)))
def test_split_at_every_position(cut):
    assert run([REPLY[:cut], REPLY[cut:]]) == split_thinking(REPLY)


def test_one_character_at_a_time():
    assert run(list(REPLY)) == split_thinking(REPLY)


def test_three_way_split_inside_both_tags():
    deltas = ["<th", "ink>ponder</th", "ink>answer"]
    assert run(deltas) == ("answer", "ponder")


def test_no_thinking_passes_through_unchanged():
    text = "Plain answer with a < b and <b>bold</b> and <thin ice>."
    assert run(list(text)) == (text, "")


def test_partial_tag_is_held_back_then_released():
    s = ThinkSplitter()
    assert s.feed("<thi") == ("", "")
    assert s.feed("s is not a tag") == ("<this is not a tag", "")


def test_past_the_answers_start_nothing_is_held_back():
    s = ThinkSplitter()
    assert s.feed("x <thi") == ("x <thi", "")


TAG_IN_ANSWER = "<think>\nplan\n</think>\n\nWrap it in <think> and </think>; <think> again."


@pytest.mark.parametrize("cut", range(1, len(TAG_IN_ANSWER)))
def test_a_think_tag_after_the_answer_started_is_answer_text(cut):
    # A thought comes first: a model writing about the tag (or a random one past its thought)
    # keeps its words in the answer, as llama.cpp's and vLLM's reasoning parsers read it.
    want = ("Wrap it in <think> and </think>; <think> again.", "plan\n")
    assert run([TAG_IN_ANSWER[:cut], TAG_IN_ANSWER[cut:]]) == want
    assert run(list(TAG_IN_ANSWER)) == want


def test_with_thinking_off_a_tag_mid_answer_opens_no_thought():
    assert run(["<think>\n\n</think>\n\n", "Hi <think>x</think> there"]) == (
        "Hi <think>x</think> there", "")


def test_text_releases_immediately_when_it_cannot_be_a_tag():
    s = ThinkSplitter()
    assert s.feed("<think>abc") == ("", "abc")
    assert s.feed(" def") == ("", " def")
    assert s.feed("</think>Hi") == ("Hi", "")


def test_prompt_opened_the_block():
    # Templates whose generation prompt ends with "<think>\n": the model writes only </think>.
    assert run(["reasoning here</think>\n\nThe answer"], in_thinking=True) == (
        "The answer",
        "reasoning here",
    )


def test_empty_think_block_thinking_off():
    assert run(["<think>\n\n</think>\n\n", "Answer."]) == ("Answer.", "")


def test_unclosed_thinking_stays_thinking_and_flushes_partial_tag():
    assert run(["<think>still going</thi"]) == ("", "still going</thi")


def test_unfinished_open_tag_at_end_is_text():
    assert run(["answer <thin"]) == ("answer <thin", "")


def test_no_strip_keeps_whitespace():
    assert run(["<think>\nx\n</think>\n\ny"], strip=False) == ("\n\ny", "\nx\n")


def test_saw_thinking_flag():
    s = ThinkSplitter()
    s.feed("\n")
    assert not s.saw_thinking
    s.feed("<think>")
    assert s.saw_thinking and s.in_thinking
