"""One answer on screen, streamed at a cost per token that does not grow with the answer.

While an answer streams, its text is split at the last block boundary (a blank line outside a
code fence, or a closing fence): the complete blocks before it go into a `Markdown` widget
(appended as they complete, parsed from the last block on), and the block still being
written (with the blocks completed since the last settle) is a plain-text tail (`ui.tail.Tail`)
repainted in place.

A layout of the screen costs the size of the whole chat (every widget in it is arranged
again, more than once when widgets are mounted), so the answer rarely changes the layout: the
tail is sized to its lines plus a few screenfuls of blank ones, which stay out of sight below
the view (the chat scrolls so the line being written is the view's last row, see
ui/follow.py; a scroll is a repaint, not a layout). The layout changes when the complete blocks settle into
Markdown (every `SETTLE_INTERVAL` seconds, and when a code block opens, so that code shows as
code; a short answer settles only at its end) or when the tail outgrows its room. When the
answer ends, the rest of the text is appended to the Markdown, which parses again from its
last block: the blocks are those a reopened conversation shows.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.containers import Vertical
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from textual.widget import Widget
from textual.widgets import Collapsible, Label, Markdown

from pocketchat.textsafe import visible
from pocketchat.ui.format import thinking_title
from pocketchat.ui.tail import Tail

TAIL_SPARE_SCREENS = 3  # blank lines under the text being written: room for seconds of text
SETTLE_INTERVAL = 4.0  # complete blocks become Markdown this often (a mount is a few layouts)


class BlockSplitter:
    """Where the complete Markdown blocks of a growing text end (scanned once per line)."""

    def __init__(self) -> None:
        self.boundary = 0  # text[:boundary] is complete blocks
        self._scanned = 0  # start of the first line not scanned yet
        self.fence = ""  # the opening fence while inside a code block
        self.fence_at = 0  # where the line of that opening fence starts

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
            self.fence_at = self._scanned - len(raw) - 1
        elif not raw.strip():
            self.boundary = self._scanned


def answer_parser() -> MarkdownIt:
    """Textual's GitHub-like Markdown, with each line break the model wrote kept (a hard break):
    a verse or an address stays in its lines, as it streamed, instead of joining into one."""
    parser = MarkdownIt("gfm-like", {"breaks": True})
    parser.core.ruler.push("hard_breaks", _hard_breaks)
    return parser


def _hard_breaks(state: StateCore) -> None:
    # markdown-it leaves `breaks` to its HTML renderer; Textual reads the tokens themselves.
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"


class AnswerMarkdown(Markdown):
    """Markdown as the model wrote it: its line breaks kept, and no blank line under the last
    block once a whole text is shown."""

    def __init__(self, markdown: str | None = None, **kwargs) -> None:
        super().__init__(markdown, parser_factory=answer_parser, **kwargs)

    def update(self, markdown: str) -> AwaitComplete:
        done = super().update(markdown)

        async def then() -> None:
            await done
            self.mark_last_block()

        return AwaitComplete(then())

    def mark_last_block(self) -> None:
        blocks = self.children
        if blocks:  # a class, not :last-child, which makes every mount restyle every block
            blocks[-1].add_class("last-block")


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
        self.tail = Tail(classes="tail")
        self.text = ""
        self._splitter = BlockSplitter()
        self._settled = 0
        self._settled_at = time.monotonic()  # a short answer is laid out as Markdown once, at its end
        self._reserved = 0  # the tail's height: its lines and the blank ones
        self.lines = 0  # the tail's lines of text

    def compose(self) -> ComposeResult:
        yield self.markdown
        yield self.tail

    def on_mount(self) -> None:
        # The room is made with the mount's own layout, before the model's first token: the
        # first lines then fill blank ones (a repaint) instead of costing layouts while it decodes.
        self._reserve(0)

    async def write(self, fragment: str) -> bool:
        """Add text and repaint the tail's new rows; True when that changed the layout.

        The layout changes when blocks settle (every SETTLE_INTERVAL, or when a code block
        opens) or the tail outgrows its room; then the tail also takes the code-block style if
        it is an open code block. In between, the tail's new lines fill its blank ones.
        """
        self.text += fragment
        boundary = self._splitter.feed(self.text)
        need = self.tail.set_text(self._tail_text())
        if not self.tail.size.width:  # not laid out yet
            return True
        code = bool(self._splitter.fence) and not self._opens_fence()  # a code block began: show it as code
        now = time.monotonic()
        settle = boundary > self._settled and (code or now - self._settled_at >= SETTLE_INTERVAL)
        if not (settle or need > self._reserved):
            self.lines = need
            return False
        if settle:
            settled, self._settled, self._settled_at = self.text[self._settled:boundary], boundary, now
            await self.markdown.append(settled)
        self.tail.set_class(self._opens_fence(), "-fence")
        self.lines = need = self.tail.set_text(self._tail_text())
        self._reserve(need)
        return True

    def _reserve(self, lines: int) -> None:
        """Size the tail to `lines` of text and the blank screens under them."""
        self._reserved = lines + TAIL_SPARE_SCREENS * max(self.app.size.height, 10)
        self.tail.styles.height = self._reserved

    def _opens_fence(self) -> bool:
        """Whether the tail is a code block still open (shown as one, its fence line left out);
        not when the tail begins with a code block that closed and another one is open below."""
        return bool(self._splitter.fence) and self._splitter.fence_at == self._settled

    def _tail_text(self) -> str:
        tail = self.text[self._settled:]
        if self.tail.has_class("-fence") and self._opens_fence():
            tail = tail.partition("\n")[2]
        return tail

    async def finish(self) -> None:
        """The rest of the text as Markdown (the tail goes).

        Markdown.append parses again from the start of the last block it holds, so the blocks
        are those a parse of the whole text gives, and the widgets already shown stay.
        """
        with self.app.batch_update():
            await self.markdown.append(self.text[self._settled:])
            self._settled = len(self.text)
            await self.tail.remove()
        if isinstance(self.markdown, AnswerMarkdown):
            self.markdown.mark_last_block()


class ThinkingBox(Collapsible):
    """The thinking, folded away without scrolling the chat to it (the chat follows the answer)."""

    def scroll_visible(self, *args, **kwargs) -> None:
        if not self.collapsed:
            super().scroll_visible(*args, **kwargs)


class AnswerView(Vertical):
    """One answer: thinking (dimmed, collapsible) above the Markdown text, figures below."""

    def __init__(self, text: str = "", thinking: str = "", *, streaming: bool = False,
                 thought: tuple[int, float | None, str] | None = None) -> None:
        super().__init__(classes="message assistant")
        self._initial_text = text
        self._initial_thinking = thinking
        self.streaming = streaming
        self.text = text
        self.thinking = thinking
        self._answer_stream: StreamingMarkdown | None = None
        self._thinking_stream: StreamingMarkdown | None = None
        # the thought's figures for its title: tokens, seconds, how it ended (ThoughtClock)
        self.thought: tuple[int, float | None, str] = thought or (0, None, "")

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
        return ThinkingBox(body, title=self.thinking_title(), collapsed=collapsed,
                           classes="thinking")

    def thinking_title(self) -> str:
        """'Thinking · 412 tokens · 38 s · ended by you' (figures not known left out)."""
        return thinking_title(*self.thought)

    def set_thought(self, tokens: int, seconds: float | None, end: str) -> None:
        """The thought's figures so far; its title follows them."""
        self.thought = (tokens, seconds, end)
        self._retitle()

    def _retitle(self) -> None:
        for box in self.query("Collapsible.thinking").results(Collapsible):
            title = self.thinking_title()
            if box.title != title:
                box.title = title

    @property
    def answer(self) -> Markdown:
        return self.query_one("Markdown.answer", Markdown)

    async def add_thinking(self, fragment: str) -> bool:
        """Add thinking text; True when the layout changed."""
        if not fragment:
            return False
        self.thinking += fragment
        mounted = self._thinking_stream is None
        if mounted:  # collapsed: its title counts tokens and seconds; a click opens it
            before = self._answer_stream or self.answer
            await self.mount(self._make_thinking(collapsed=True), before=before)
        assert self._thinking_stream is not None
        return await self._thinking_stream.write(visible(fragment)) or mounted

    async def add_text(self, fragment: str) -> bool:
        """Add answer text; True when the layout changed."""
        if not fragment:
            return False
        folded = not self.text and bool(self.thinking)
        if folded:
            # The answer begins: fold the thinking away (a click opens it again).
            await self._finish_thinking()
            for box in self.query("Collapsible.thinking").results(Collapsible):
                box.collapsed = True
        self.text += fragment
        if self._answer_stream is None:  # pragma: no cover - a streaming view has one
            self._answer_stream = StreamingMarkdown(AnswerMarkdown(classes="answer"))
            await self.mount(self._answer_stream, before=self.query_one(".figures"))
        return await self._answer_stream.write(visible(fragment)) or folded

    def writing(self) -> tuple[Widget, int] | None:
        """Where the text being written is, answer or thinking: the tail it is written into and
        its rows of text (the answer's empty tail before its first token; None once it ended)."""
        for stream in (self._answer_stream, self._thinking_stream):
            if stream is self._thinking_stream and self._thinking_folded():
                continue  # a folded thought's rows are not on screen
            if stream is not None and stream.text and stream.tail.is_attached:
                return stream.tail, stream.tail.rows
        stream = self._answer_stream
        if stream is not None and stream.tail.is_attached:
            return stream.tail, 0
        return None

    def _thinking_folded(self) -> bool:
        boxes = self.query("Collapsible.thinking").results(Collapsible)
        return any(box.collapsed for box in boxes)

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
