"""The streaming answer: complete blocks settle into Markdown, the block being written stays a tail."""

from __future__ import annotations

from scripted_engine import Reply
from uitools import SIZE, answered, make, ready, run, screen_text, send

from pocketchat.ui.answer import BlockSplitter

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
