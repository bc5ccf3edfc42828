"""Keeping the line being written at the bottom of the chat's view while an answer streams,
unless the user scrolled up.

The answer keeps blank rows under its text (so that a new line is not a layout, see
ui/answer.py), so the chat log is not anchored to its end while the answer streams: it follows
the text instead. Where the log is scrolled is decided inside the layout itself: the log asks
its `Follower` each time it is arranged (`ChatLog.arrange`), and the follower puts the text's
last row on the view's last row, from that arrangement, before anything is drawn. No frame
shows the blank rows, however late a timer fires or however loaded the machine is; a chat
shorter than the view sits at the view's bottom, as it does once the answer ends (Textual's
anchor). When a new row of text needs no layout, `follow()` asks for a scroll, a repaint of the
view (Textual's scroll fast path), which arranges the log again from its cache.
"""

from __future__ import annotations

from typing import Protocol

from textual.geometry import Region, Size
from textual.layout import DockArrangeResult
from textual.widget import Widget


class Written(Protocol):
    def writing(self) -> tuple[Widget, int] | None:
        """The widget the text is being written into and the rows of text in it (None: none)."""
        ...


class Follower:
    """Scrolls one chat log after one answer (a new one for each answer)."""

    def __init__(self, log: Widget, view: Written) -> None:
        self.log = log
        self.view = view
        self.scrolled_to: float | None = None  # where the log was last put; None: not yet
        self._placed: tuple[Widget, int] | None = None  # what was written when it was put there

    @property
    def following(self) -> bool:
        """False once the user scrolled up from where the text was followed to."""
        return self.scrolled_to is None or self.log.scroll_y > self.scrolled_to - 1

    def release(self) -> None:
        """The answer's blank rows are coming: stop sticking to the log's end."""
        if self.scrolled_to is None:
            self.log.anchor(False)

    def place(self, arrangement: DockArrangeResult, size: Size) -> int:
        """Called by the log as it is arranged: scroll so that the text's last row is the view's
        last row (the log's content end when nothing is being written). Returns the rows under
        the text, which the log leaves out of what can be scrolled to."""
        writing = self.view.writing()
        end = arrangement.spatial_map.total_region.bottom
        row = end if writing is None else row_under(self.log, arrangement, *writing)
        if row is None:
            return 0
        if self.following:  # else the user reads back: stay there (scrolling down follows again)
            y = row - size.height  # negative: a chat shorter than the view sits at its bottom
            log = self.log
            if y != log.scroll_y:
                # As Textual's own anchor does in the same place: no validation (it would clamp
                # a negative offset), no watcher (the compositor reads the offset after this).
                log.set_reactive(Widget.scroll_y, y)
                log.set_reactive(Widget.scroll_target_y, y)
                log.vertical_scrollbar._reactive_position = y
            self.scrolled_to = y
            self._placed = writing
        return max(end - row, 0)

    def follow(self) -> None:
        """The text gained rows without a layout: scroll the view (the log places it)."""
        if self.following and self.view.writing() != self._placed:
            self.log._refresh_scroll()


def row_under(log: Widget, arrangement: DockArrangeResult, widget: Widget, rows: int) -> int | None:
    """The row of `log`'s content (its virtual space) right under the first `rows` rows of
    `widget`'s content, by the arrangement being laid out and those of the containers between
    (Textual caches each: the compositor reuses them). None: `widget` is not laid out there."""
    chain: list[Widget] = []
    node = widget
    while node is not log:
        if not isinstance(node, Widget):
            return None
        chain.append(node)
        node = node.parent
    top, result = 0, arrangement
    for child in reversed(chain):
        placement = next((p for p in result.placements if p.widget is child), None)
        if placement is None:  # not displayed
            return None
        region = placement.region
        gutter = child.styles.gutter
        top += region.y + placement.offset.y + gutter.top
        if child is widget:
            return top + rows
        inner = child._get_scrollable_region(Region(0, 0, region.width, region.height).shrink(gutter))
        result = child.arrange(inner.size)
    return None  # pragma: no cover - the loop returns at `widget`
