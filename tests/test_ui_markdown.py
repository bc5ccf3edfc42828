"""The chat shows what the model wrote: each line break in an answer stays a line break once the
answer is laid out as Markdown (at its end, and when the chat is reopened), at 80 and 120 columns."""

from __future__ import annotations

import pytest
from support.scripted_engine import Reply
from support.uitools import answered, make, ready, run, screen_text, send

from pocketchat.conversations import Conversation

LIST_AND_VERSE = """Three things to pack:
1. A map
2. A lamp
3. A coat

The sea at night
is dark and wide,
the moon a light
upon the tide."""

LINES = [line for line in LIST_AND_VERSE.splitlines() if line]


def shown_lines(screen: str) -> list[str]:
    """The answer's rows as a reader sees them (the message border and the scrollbar left out)."""
    return [line.strip(" █▌▐▁▂▃▄▅▆▇▔") for line in screen.splitlines()]


def assert_each_line_on_its_own_row(screen: str) -> None:
    rows = shown_lines(screen)
    numbered = [row for row in rows if row[:2] in ("1.", "2.", "3.")]
    assert len(numbered) == 3, screen  # the list: one item a row
    for line in ("Three things to pack:", "The sea at night", "is dark and wide,",
                 "the moon a light", "upon the tide."):
        assert line in rows, f"{line!r} is not a row of its own:\n{screen}"


@pytest.mark.parametrize("width", [80, 120])
def test_a_verse_and_a_numbered_list_keep_their_line_breaks_after_the_answer_ends(width):
    async def scenario():
        app, _, _ = make(Reply(LIST_AND_VERSE), delay=0.002)
        async with app.run_test(size=(width, 30)) as pilot:
            await ready(pilot)
            await send(pilot, "a verse, please")
            await answered(pilot)
            assert_each_line_on_its_own_row(screen_text(app))
            return app.conversation

    conversation = run_value(scenario())
    assert conversation.messages[-1].content == LIST_AND_VERSE


@pytest.mark.parametrize("width", [80, 120])
def test_a_reopened_answer_keeps_its_line_breaks(width):
    conversation = Conversation(id="verse-1", model="Scripted-1B")
    conversation.add("user", "a verse, please")
    conversation.add("assistant", LIST_AND_VERSE)

    async def scenario():
        app, _, _ = make(conversation=conversation)
        async with app.run_test(size=(width, 30)) as pilot:
            await ready(pilot)
            assert_each_line_on_its_own_row(screen_text(app))

    run(scenario())


def test_thinking_keeps_its_line_breaks_too():
    thinking = "First: the map.\nSecond: the lamp.\nThird: the coat."

    async def scenario():
        app, _, _ = make(Reply("Packed.", thinking=thinking))
        async with app.run_test(size=(80, 30)) as pilot:
            await ready(pilot)
            await send(pilot, "plan it")
            await answered(pilot)
            await pilot.click("CollapsibleTitle")
            await pilot.pause()
            rows = shown_lines(screen_text(app))
            for line in thinking.splitlines():
                assert line in rows, screen_text(app)

    run(scenario())


def run_value(coro):
    import asyncio

    return asyncio.run(coro)
