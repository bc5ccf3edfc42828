"""The streaming answer: complete blocks settle into Markdown, the block being written stays a tail."""

from __future__ import annotations

import asyncio
import time

import pytest

from support.scripted_engine import Reply, tokens
from support.uitools import (SIZE, answered, blank_rows_under_the_text, make, ready, run, screen_text,
                              send, wait_for)

from pocketchat.ui.answer import BlockSplitter
from pocketchat.ui.widgets import UserMessage

ANSWER = """A first paragraph that ends here.

- one
- two

```python
def f():

    return 1
```

~~~
tilde fence
~~~
Last words, still being written"""


def test_blocks_end_at_blank_lines_outside_fences_and_at_closing_fences():
    splitter = BlockSplitter()
    text = ""
    boundaries = []
    for piece in ANSWER.split(" "):  # fed a word at a time, as tokens arrive
        text += piece + " "
        boundaries.append(splitter.feed(text))
    settled = text[: boundaries[-1]]
    assert settled.endswith("~~~\ntilde fence\n~~~\n")
    assert boundaries == sorted(boundaries)  # only moves forward
    inside = text.index("def f():\n\n") + len("def f():\n\n")
    assert inside not in boundaries  # the blank line inside the code block ends nothing
    code = "```python\nx = 1\n\n```\nnext"
    assert BlockSplitter().feed(code) == code.index("next")  # the closing fence ends a block
    assert BlockSplitter().feed("    ```\nindented code\n\nmore") == len("    ```\nindented code\n\n")
    assert "Last words" not in settled


def test_a_streamed_answer_ends_as_the_same_screen_as_a_reopened_conversation():
    async def scenario():
        app, _, _ = make(Reply(ANSWER, thinking="Let me think about fences."), delay=0.03)  # ~1.5 s: many updates
        async with app.run_test(size=(100, 50)) as pilot:
            await ready(pilot)
            await send(pilot, "show me")
            await answered(pilot)
            streamed = screen_text(app)
            conversation = app.conversation
        assert "def f():" in streamed and "• one" in streamed and "```" not in streamed
        assert "Let me think" not in streamed  # the thinking folded away, apart from the answer

        again, _, _ = make(conversation=conversation)
        async with again.run_test(size=(100, 50)) as pilot:
            await ready(pilot)
            reopened = screen_text(again)
        def messages(screen: str) -> list[str]:  # the conversation's lines, wherever scrolled
            return [line.rstrip(" ▁▂▃▄▅▆▇█") for line in screen.splitlines() if line.startswith(" █")]

        assert messages(streamed) == messages(reopened)
        assert len(messages(streamed)) > 15

    run(scenario())


PARAGRAPHS = [f"Line {i} of a long answer, written a few words at a time.\n\n" for i in range(240)]
LINES = "".join(PARAGRAPHS)


def test_a_long_answer_is_laid_out_a_few_times_not_once_per_few_lines(monkeypatch):
    """A layout arranges every widget in the chat: while an answer streams it must stay rare.

    The blocks settle into Markdown every SETTLE_INTERVAL seconds; the answer's clock here
    moves a pump tick (0.1 s) per piece written, not with the wall clock: a loaded machine,
    where the answer takes longer, does not settle (and lay out) more often than a quiet one.
    """
    import types

    from textual._compositor import Compositor

    from pocketchat.ui import answer

    ticks = iter(range(10**9))
    monkeypatch.setattr(answer, "time", types.SimpleNamespace(monotonic=lambda: next(ticks) * 0.1))
    layouts: list[float] = []
    reflow = Compositor.reflow

    def counted(self, *args, **kwargs):
        layouts.append(time.monotonic())
        return reflow(self, *args, **kwargs)

    monkeypatch.setattr(Compositor, "reflow", counted)

    async def scenario():
        app, _, _ = make(Reply(LINES), delay=0.001)  # 240 paragraphs (480 lines) in ~3 s
        async with app.run_test(size=(100, 32)) as pilot:
            await ready(pilot)
            layouts.clear()
            await send(pilot, "a long one")
            await answered(pilot, timeout=30)
            assert "Line 239 of a long answer" in screen_text(app)
        return len(layouts)

    count = asyncio.run(scenario())
    assert count <= 25, f"{count} layouts for one answer of 480 lines"


def test_the_line_being_written_stays_in_view_and_a_user_who_scrolls_up_stays_put():
    async def scenario():
        held = len(tokens("".join(PARAGRAPHS[:100])))  # up to line 99
        app, engine, _ = make(Reply(LINES, hold_after=held), delay=0.0005)
        async with app.run_test(size=(100, 32)) as pilot:
            await ready(pilot)
            await send(pilot, "a long one")
            await wait_for(pilot, engine.held.is_set)
            await wait_for(pilot, lambda: "Line 99 " in screen_text(app), what="line 99 on screen")
            await pilot.pause(0.3)
            screen = screen_text(app).splitlines()
            rows = [i for i, line in enumerate(screen) if "Line 99 " in line]
            prompt = next(i for i, line in enumerate(screen) if "╭" in line)
            assert rows and "Line 100 " not in "\n".join(screen)
            blank = prompt - rows[-1] - 1  # blank lines under the newest line
            assert blank <= 1 + 30 // 3, screen_text(app)

            log = app.query_one("#chat-log")
            log.scroll_to(y=log.scroll_y - 40, animate=False, immediate=True)  # the user reads back
            await pilot.pause()
            where = log.scroll_y
            engine.release.set()
            await answered(pilot, timeout=30)
            assert log.scroll_y == where and "Line 239" not in screen_text(app)

    run(scenario())


def test_a_short_answer_becomes_markdown_once_at_its_end_but_code_shows_as_code_at_once():
    """Settling blocks into Markdown is a layout of the whole chat: a short prose answer is
    shown as text while it streams and laid out as Markdown when it ends; a code block that
    opens settles what is before it at once, so the code shows in its box while it streams."""
    from pocketchat.ui.answer import AnswerMarkdown, StreamingMarkdown

    prose = "A first paragraph that ends here.\n\nA second one, also complete.\n\nStill being"
    code = prose.replace("Still being", "```python\ndef f():\n    return")

    async def scenario(text: str) -> tuple[int, bool, int]:
        app, engine, _ = make(Reply(text + " words.", hold_after=len(tokens(text))))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "go")
            await wait_for(pilot, engine.held.is_set)
            await wait_for(pilot, lambda: text.split()[-1] in screen_text(app), what="the text")
            markdown = app.query_one(StreamingMarkdown)
            settled = len(markdown.markdown.children)
            fenced = markdown.tail.has_class("-fence")
            engine.release.set()
            await answered(pilot)
            return settled, fenced, len(app.query_one(AnswerMarkdown).children)

    settled, fenced, blocks = run_value(scenario(prose))
    assert (settled, fenced, blocks) == (0, False, 3)
    settled, fenced, blocks = run_value(scenario(code))
    assert settled == 2 and fenced and blocks == 3


def run_value(coro):
    return asyncio.run(coro)


def test_the_model_starts_once_the_message_is_laid_out_on_screen():
    """Laying out the chat for a new message takes a core for tens of ms: done before the
    model decodes, it is not taken from the first tokens, and the message shows sooner."""
    async def scenario():
        app, engine, _ = make(Reply("Hi there."), Reply("Again."))
        laid_out: list[bool] = []
        chat = engine.chat

        def watched(messages, options=None):
            users = list(app.query(UserMessage))
            laid_out.append(len(users) == len(laid_out) + 1 and users[-1].region.height > 0)
            return chat(messages, options)

        engine.chat = watched
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            for prompt in ("hello", "and again"):
                await send(pilot, prompt)
                await answered(pilot)
            assert "Again." in screen_text(app)
        assert laid_out == [True, True]

    run(scenario())


class Frames:
    """Every frame the app paints, as text (Textual's compositor refresh is wrapped): a check
    over all of them does not depend on when a test happens to look."""

    def __init__(self, monkeypatch) -> None:
        from textual.screen import Screen

        self.screens: list[str] = []
        self.recording = False
        refresh = Screen._compositor_refresh

        def recorded(screen) -> None:
            refresh(screen)
            if self.recording and screen.is_current:
                self.screens.append(screen_text(screen.app))

        monkeypatch.setattr(Screen, "_compositor_refresh", recorded)


SHORT = "Two lines, then it waits:\nthe second line is written"
THOUGHT = "First a thought over a few words,\nthen another line of it."


@pytest.mark.parametrize("thinking", ["", THOUGHT], ids=["answer", "thinking-then-answer"])
@pytest.mark.parametrize("width", [80, 120])
def test_no_frame_of_a_short_answer_shows_blank_rows_under_its_text(monkeypatch, width, thinking):
    """The answer's room (blank rows, so that a new line is not a layout) never shows: a chat
    shorter than the view sits at the view's bottom while the answer streams, as after it; so
    does the thinking, and the answer after the thinking folds away."""
    frames = Frames(monkeypatch)

    async def scenario():
        reply = Reply(SHORT + " out.", thinking=thinking,
                      hold_after=len(tokens(thinking)) + len(tokens(SHORT)))
        app, engine, _ = make(reply, delay=0.01)
        async with app.run_test(size=(width, 30)) as pilot:
            await ready(pilot)
            frames.recording = True
            await send(pilot, "a short one")
            await wait_for(pilot, engine.held.is_set)
            await wait_for(pilot, lambda: "is written" in screen_text(app), what="the held text")
            await pilot.pause(0.3)
            frames.recording = False
            engine.release.set()
            await answered(pilot)
            assert blank_rows_under_the_text(screen_text(app)) == 0

    run(scenario())
    written = [s for s in frames.screens if "First a thought" in s or "Two lines" in s]
    assert written, "no frame showed the answer"  # (a busy machine paints fewer: one, at least)
    worst = max(written, key=blank_rows_under_the_text)
    assert blank_rows_under_the_text(worst) == 0, worst


MIXED = "".join(f"Part {i}: a paragraph of the answer that wraps over the width of the chat once or twice "
                f"as it goes on.\n\n- a list item\n- another item\n\n```python\nx = {i}\ny = {i} * 2\n```\n\n"
                for i in range(60))
IN_CODE = MIXED[: MIXED.index("x = 40\n") + len("x = 40\n")]  # a code block open: it settles


def test_no_frame_shows_blank_rows_under_the_text_while_a_long_answer_is_laid_out_again(monkeypatch):
    """Every frame painted mid-answer, whatever the timing: the answer is held inside an open
    code block, so the blocks before it settle into Markdown (a layout that moves the text: a
    list or a code block takes other rows as Markdown than as plain text), and the text outgrows
    its room on the way; the view is placed within each layout, so no frame shows the room
    under the newest line."""
    frames = Frames(monkeypatch)

    async def scenario():
        app, engine, _ = make(Reply(MIXED, hold_after=len(tokens(IN_CODE))), delay=0.0005)
        async with app.run_test(size=(100, 32)) as pilot:
            await ready(pilot)
            frames.recording = True
            await send(pilot, "a long one")
            await wait_for(pilot, engine.held.is_set, timeout=60)
            await wait_for(pilot, lambda: "x = 40" in screen_text(app), what="the held text")
            await pilot.pause(0.3)
            frames.recording = False
            held_screen = screen_text(app)
            engine.release.set()
            await answered(pilot, timeout=60)
            end = screen_text(app)
            assert "x = 59" in end and blank_rows_under_the_text(end) == 0, end
            return held_screen

    held_screen = run_value(scenario())
    assert "• a list item" in held_screen and "```" not in held_screen  # settled into Markdown
    assert blank_rows_under_the_text(held_screen) == 0, held_screen
    mid = [s for s in frames.screens if "a long one" not in s and "Part " in s]  # longer than the view
    assert len(mid) >= 3, len(frames.screens)
    bad = [s for s in mid if blank_rows_under_the_text(s)]
    assert not bad, f"{len(bad)} of {len(mid)} frames with blank rows; the first:\n{bad[0]}"
