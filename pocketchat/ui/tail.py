"""The text being written, as plain wrapped lines: an update repaints only the rows it changed.

A `Static` repaints all of itself on every update: each of its rows in view is wrapped and
styled again and goes through the screen's compositor, about 5 ms for a screenful on a slow
core, taken from the model while it decodes. Text that streams only ever grows at its end, so
`Tail` keeps the rows of the lines already complete and wraps again only the last line; an
update repaints from that line's first row down.
"""

from __future__ import annotations

from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget


class Tail(Widget):
    """Plain text wrapped to the widget's width, rendered a row at a time (Textual's line API).

    Rows under the text are blank; the owner sets the widget's height.
    """

    DEFAULT_CSS = "Tail { height: auto; }"

    def __init__(self, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.text = ""
        self._blank = True  # the text is only whitespace: it takes no rows
        self._rows: list[Strip] = []  # the wrapped rows of `text`
        self._kept = 0  # rows of the complete lines (those before the last newline)
        self._kept_chars = 0  # text[:_kept_chars] is those lines, their last newline included
        self._key: tuple[int, object] | None = None  # (width, style) the rows were made for

    @property
    def rows(self) -> int:
        """How many rows the text takes at the current width (0 for blank text or no width)."""
        if not self.size.width:
            return 0
        self._wrap()
        return 0 if self._blank else len(self._rows)

    def set_text(self, text: str) -> int:
        """Show `text`; repaint the rows it changed. Returns `rows`."""
        old_rows, old_kept = len(self._rows), self._kept
        appended = text.startswith(self.text[: self._kept_chars])
        self.text = text
        self._blank = not text.strip()
        if not appended:
            self._key = None
        elif self._key is not None and self._current_key() == self._key:
            self._extend()
            width = self.size.width
            changed = max(len(self._rows), old_rows) - old_kept
            if changed > 0:
                self.refresh(Region(0, old_kept, width, changed))
            return self.rows
        self.refresh()
        return self.rows

    def _current_key(self) -> tuple[int, object]:
        return (self.size.width, self.visual_style)

    def _wrap(self) -> None:
        """Make the rows again when the width or the style changed since they were made."""
        key = self._current_key()
        if key != self._key:
            self._key = key
            self._rows, self._kept, self._kept_chars = [], 0, 0
            self._extend()

    def _extend(self) -> None:
        """Wrap the lines completed since the last call, and the last line again."""
        text = self.text.rstrip("\n")
        end = text.rfind("\n") + 1  # text[:end]: complete lines
        del self._rows[self._kept:]
        if end > self._kept_chars:
            for line in text[self._kept_chars:end - 1].split("\n"):
                self._rows.extend(self._wrap_line(line))
            self._kept, self._kept_chars = len(self._rows), end
        self._rows.extend(self._wrap_line(text[end:]))

    def _wrap_line(self, line: str) -> list[Strip]:
        width = self.size.width
        if width <= 0:
            return []
        return Visual.to_strips(self, Content(line), width, None, self.visual_style,
                                apply_selection=False) or [Strip.blank(width)]

    def get_content_height(self, container, viewport, width: int) -> int:
        return self.rows

    def render_line(self, y: int) -> Strip:
        self._wrap()
        if y < len(self._rows) and not self._blank:
            return self._rows[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)
