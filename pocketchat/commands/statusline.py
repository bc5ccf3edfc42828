"""One status line on stderr, rewritten in place while long work runs (reading a prompt,
loading a model), and wiped when it ends. Only on a terminal: to a file or a pipe it writes
nothing, so a redirected stderr holds no carriage returns."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from pocketchat.engines.types import PromptProgress
from pocketchat.textsafe import one_line
from pocketchat.ui.format import prompt_progress_line

LOAD_WORDS = {"checking": "Checking the model file", "loading": "Loading the model",
              "ready": "Model loaded"}


class StatusLine:
    """`show(text)` rewrites the line (at most every `interval_s`, `force` always); `clear()`
    wipes it; `quiet`: never writes (a caller whose output is JSON)."""

    def __init__(self, stream: TextIO | None = None, *, interval_s: float = 0.2,
                 quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        try:
            self.tty = not quiet and bool(self.stream.isatty())
        except (ValueError, OSError):
            self.tty = False
        self.interval_s = interval_s
        self._last = 0.0
        self._width = 0

    def show(self, text: str, *, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        text = one_line(text)
        self.stream.write("\r" + text.ljust(self._width))
        self._width = len(text)
        self.stream.flush()

    def prompt(self, p: PromptProgress) -> None:
        """A prompt being read: done/total, rate and time left (the first one at once)."""
        self.show(prompt_progress_line(p.done, p.total, p.tok_s, p.seconds_left),
                  force=p.done == 0)

    def load(self, stage: str, fraction: float) -> None:
        """A model loading (`Engine` constructors' `on_progress(stage, fraction)`)."""
        words = LOAD_WORDS.get(stage, stage)
        self.show(f"{words} {fraction * 100:.0f}%" if stage == "loading" else words)

    def clear(self) -> None:
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
