"""Keeping the line being written in view while an answer streams, unless the user scrolled up.

The answer keeps blank lines under its text (so that a new line is not a layout, see
ui/answer.py), so the chat log is not anchored to its end while the answer streams: it
follows the text instead. When the text reaches the bottom of the view, the log scrolls it up
by a third of the view; a scroll repaints the whole view, so it happens every few lines, not
on every update.
"""

from __future__ import annotations

from typing import Protocol

from textual.widget import Widget

FOLLOW_STEP = 3  # the log scrolls by a third of its height when the answer reaches its bottom


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
        """Scroll so the line being written shows, at most a step of blank lines under it."""
        log = self.log
        if not self.following:
            return  # the user reads back: stay there (scrolling back down follows again)
        bottom = view.text_bottom()
        if bottom is None:
            return
        region = log.scrollable_content_region
        step = max(1, region.height // FOLLOW_STEP)
        if bottom > region.bottom:  # a new line below the view: scroll by a step
            delta = bottom - region.bottom + step - 1
        elif bottom < region.bottom - step:  # more than a step of blank lines showing
            delta = bottom - region.bottom
        else:
            delta = 0
        target = max(0, min(log.scroll_y + delta, log.max_scroll_y))
        if target != log.scroll_y:
            log.scroll_to(y=target, animate=False, immediate=True)
        self.scrolled_to = log.scroll_y
