"""One answer on screen, streamed at a cost per token that does not grow with the answer.

While an answer streams, its text is split at the last block boundary (a blank line outside a
code fence, or a closing fence): the complete blocks before it go into a `Markdown` widget
once each (appended as they complete, parsed from the last block on), and the block still
being written (with the blocks completed in the last second) is a plain-text tail (`Static`)
repainted in place, re-laid out only when its height changes. So an update costs the size of one block, not of the answer; the screen's
layout runs a few times a second (when a line or a block is added), not on every update.
When the answer ends, the whole text is parsed once more, so what shows is exactly what a
reopened conversation shows.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Collapsible, Label, Markdown, Static

from pocketchat.textsafe import visible

TAIL_SPARE = 3  # blank lines kept under the text being written, so a new line needs no layout
SETTLE_INTERVAL = 1.0  # complete blocks become Markdown at most once a second (a mount is a layout)


class BlockSplitter:
    """Where the complete Markdown blocks of a growing text end (scanned once per line)."""

    def __init__(self) -> None:
        self.boundary = 0  # text[:boundary] is complete blocks
        self._scanned = 0  # start of the first line not scanned yet
        self.fence = ""  # the opening fence while inside a code block

    def feed(self, text: str) -> int:
        """Scan the complete lines added since the last call; the boundary after them."""
        while True:
            end = text.find("\n", self._scanned)
            if end < 0:
                return self.boundary
            line = text[self._scanned:end]
            self._scanned = end + 1
            self._line(line)

    def _line(self, raw: str) -> None:
        line = raw.lstrip(" ")
        if len(raw) - len(line) > 3:  # indented code: no fence here
            line = ""
        if self.fence:
            run = line.rstrip()
            if run and run[0] == self.fence[0] and set(run) == {run[0]} and len(run) >= len(self.fence):
                self.fence = ""
                self.boundary = self._scanned
        elif line[:3] in ("```", "~~~"):
            char = line[0]
            self.fence = line[: len(line) - len(line.lstrip(char))]
        elif not raw.strip():
            self.boundary = self._scanned


class AnswerMarkdown(Markdown):
    """Markdown whose last block has no blank line under it once a whole text is shown."""

    def update(self, markdown: str) -> AwaitComplete:
        done = super().update(markdown)

        async def then() -> None:
            await done
            blocks = self.children
            if blocks:  # a class, not :last-child, which makes every mount restyle every block
                blocks[-1].add_class("last-block")

        return AwaitComplete(then())


class StreamingMarkdown(Vertical):
    """A Markdown document written a piece at a time: complete blocks rendered, a plain tail."""

    DEFAULT_CSS = """
    StreamingMarkdown { height: auto; }
    StreamingMarkdown > .tail { height: auto; }
    StreamingMarkdown > .tail.-fence { margin: 1 0; padding: 0 2; background: black 10%; }
    """

    def __init__(self, markdown: Markdown, **kwargs) -> None:
        super().__init__(**kwargs)
        self.markdown = markdown
        self.tail = Static("", markup=False, classes="tail")
        self.text = ""
        self._splitter = BlockSplitter()
        self._settled = 0
        self._settled_at = 0.0
        self._reserved = 0  # the tail's height: its lines and a few spare ones

    def compose(self) -> ComposeResult:
        yield self.markdown
        yield self.tail

    async def write(self, fragment: str) -> None:
        """Add text: settle the blocks it completes (at most once a second), repaint the tail."""
        self.text += fragment
        boundary = self._splitter.feed(self.text)
        now = time.monotonic()
        if boundary > self._settled and now - self._settled_at >= SETTLE_INTERVAL:
            self._settled_at = now
            settled, self._settled = self.text[self._settled:boundary], boundary
            await self.markdown.append(settled)
        self._show_tail(self.text[self._settled:])

    def _show_tail(self, tail: str) -> None:
        fenced = bool(self._splitter.fence) and tail.lstrip(" ").startswith(self._splitter.fence)
        if fenced:  # an open code block: its lines so far, the fence line left out
            tail = tail.partition("\n")[2]
        self.tail.set_class(fenced, "-fence")
        content = Content(tail.rstrip("\n"))
        width = self.tail.size.width
        if not width:  # not laid out yet: its height follows the text
            self.tail.update(content)
            return
        need = content.get_height(self.tail.styles, width) if tail.strip() else 0
        if need > self._reserved or need + 2 * TAIL_SPARE < self._reserved:
            # A few spare lines: the screen is laid out again every few lines, not every line.
            self._reserved = need + TAIL_SPARE if need else 0
            self.tail.styles.height = self._reserved
        self.tail.update(content, layout=False)

    async def finish(self) -> None:
        """The whole text as Markdown, parsed once (the tail goes)."""
        await self.tail.remove()
        await self.markdown.update(self.text)


class AnswerView(Vertical):
    """One answer: thinking (dimmed, collapsible) above the Markdown text, figures below."""

    def __init__(self, text: str = "", thinking: str = "", *, streaming: bool = False) -> None:
        super().__init__(classes="message assistant")
        self._initial_text = text
        self._initial_thinking = thinking
        self.streaming = streaming
        self.text = text
        self.thinking = thinking
        self._answer_stream: StreamingMarkdown | None = None
        self._thinking_stream: StreamingMarkdown | None = None

    def compose(self) -> ComposeResult:
        if self._initial_thinking:
            yield self._make_thinking(collapsed=not self.streaming)
        if self.streaming:
            self._answer_stream = StreamingMarkdown(AnswerMarkdown(classes="answer"), classes="answer-stream")
            yield self._answer_stream
        else:
            yield AnswerMarkdown(visible(self._initial_text), classes="answer")
        yield Label("", classes="figures")

    def _make_thinking(self, collapsed: bool) -> Collapsible:
        body: Markdown | StreamingMarkdown = AnswerMarkdown(visible(self._initial_thinking),
                                                           classes="thinking-text")
        if self.streaming:
            self._thinking_stream = StreamingMarkdown(body, classes="thinking-stream")
            body = self._thinking_stream
        return Collapsible(body, title="Thinking", collapsed=collapsed, classes="thinking")

    @property
    def answer(self) -> Markdown:
        return self.query_one("Markdown.answer", Markdown)

    async def add_thinking(self, fragment: str) -> None:
        if not fragment:
            return
        self.thinking += fragment
        if self._thinking_stream is None:
            before = self._answer_stream or self.answer
            await self.mount(self._make_thinking(collapsed=False), before=before)
        assert self._thinking_stream is not None
        await self._thinking_stream.write(visible(fragment))

    async def add_text(self, fragment: str) -> None:
        if not fragment:
            return
        if not self.text and self.thinking:
            # The answer begins: fold the thinking away (a click opens it again).
            await self._finish_thinking()
            for box in self.query("Collapsible.thinking").results(Collapsible):
                box.collapsed = True
        self.text += fragment
        if self._answer_stream is None:  # pragma: no cover - a streaming view has one
            self._answer_stream = StreamingMarkdown(AnswerMarkdown(classes="answer"))
            await self.mount(self._answer_stream, before=self.query_one(".figures"))
        await self._answer_stream.write(visible(fragment))

    async def _finish_thinking(self) -> None:
        if self._thinking_stream is not None and self._thinking_stream.tail.is_attached:
            await self._thinking_stream.finish()

    async def finish(self, figures: str, interrupted: bool) -> None:
        await self._finish_thinking()
        if self._answer_stream is not None and self._answer_stream.tail.is_attached:
            await self._answer_stream.finish()
        self.streaming = False
        self.set_figures(figures, interrupted)

    def set_figures(self, figures: str, interrupted: bool) -> None:
        label = self.query_one(".figures", Label)
        text = figures
        if interrupted:
            text = f"{figures} · interrupted" if figures else "interrupted"
        label.update(text)
        label.set_class(interrupted, "interrupted")
