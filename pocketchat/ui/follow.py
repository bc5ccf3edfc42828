"""Keeping the line being written at the bottom of the chat's view while an answer streams,
unless the user scrolled up.

The answer keeps blank lines under its text (so that a new line is not a layout, see
ui/answer.py), so the chat log is not anchored to its end while the answer streams: it
follows the text instead, scrolled so that the text's last row is the view's last row and the
blank lines stay below the view, as the chat looks once the answer ends. The log scrolls when
the text gains a row (a new line, or a line that wraps) or a layout moved it: a scroll is a
repaint of the view (Textual's scroll fast path, not a layout); a tick that only lengthens the
last row does not scroll and repaints that row alone.
"""

from __future__ import annotations

from typing import Protocol

from textual.widget import Widget


class Written(Protocol):
    def text_bottom(self) -> int | None: ...


class Follower:
    """Scrolls one chat log after one answer (a new one for each answer)."""

    def __init__(self, log: Widget) -> None:
        self.log = log
        self.scrolled_to: float | None = None  # where the log was last put; None: not yet

    @property
    def following(self) -> bool:
        """False once the user scrolled up from where the text was followed to."""
        return self.scrolled_to is None or self.log.scroll_y > self.scrolled_to - 1

    def release(self) -> None:
        """The answer's blank lines are coming: stop sticking to the log's end."""
        if self.scrolled_to is None:
            self.log.anchor(False)

    def follow(self, view: Written) -> None:
        """Scroll so the text's last row is the view's last row (the chat's top when the chat
        is shorter than the view): no blank line of the answer's room shows under it."""
        log = self.log
        if not self.following:
            return  # the user reads back: stay there (scrolling back down follows again)
        bottom = view.text_bottom()
        if bottom is None:
            return
        delta = bottom - log.scrollable_content_region.bottom
        target = max(0, min(log.scroll_y + delta, log.max_scroll_y))
        if target != log.scroll_y:
            log.scroll_to(y=target, animate=False, immediate=True)
        self.scrolled_to = log.scroll_y
