"""The decode rate of the last few seconds (what the status bar shows while an answer streams)."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

WINDOW_SECONDS = 3.0


class RecentRate:
    """Tokens per second over the last `window` seconds of an answer, fed the running count."""

    def __init__(self, window: float = WINDOW_SECONDS,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.window, self.clock = window, clock
        self._points: deque[tuple[float, int]] = deque()

    def add(self, tokens: int) -> None:
        """`tokens` generated so far, now."""
        now = self.clock()
        points = self._points
        points.append((now, tokens))
        # keep one point at or before the window's start, so the window is covered whole
        while len(points) > 2 and points[1][0] <= now - self.window:
            points.popleft()

    def tok_s(self) -> float:
        """The rate over the window (0.0 before two tokens)."""
        if len(self._points) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._points[0], self._points[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0
