"""Files read while the question is typed: one read-ahead in a thread of its own.

`ReadAhead.run()` waits for what the engine does before it (the previous answer's state save,
a saved state being loaded, an earlier read-ahead), then runs `engine.chat(messages,
ChatOptions(read_ahead=True))`, where the last message is the user message being written with
the files attached and no text yet: the engine evaluates the conversation up to where the
question's text will begin and generates nothing; the answer after it reads only the
question. The UI polls `progress` and `done`. Nothing here knows Textual.

The engine takes one request at a time: an answer sent while a read-ahead runs waits for it
(`wait`); `cancel()` stops it after the piece being read (what was read stays in the engine's
cache: the answer goes on from there).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from pocketchat.documents.attachment import Attachment
from pocketchat.engines.types import ChatOptions, Engine, Message, PromptProgress, Stats

FINISH_WITHIN = 2.0  # Enter lets a read-ahead with at most this many seconds left finish


class ReadAhead:
    """One read-ahead of `attachments` after `messages` (the conversation so far)."""

    def __init__(self, engine: Engine, messages: Sequence[Message],
                 attachments: Sequence[Attachment], options: ChatOptions,
                 waits: Sequence[Callable[[], object]] = ()) -> None:
        self.engine = engine
        self.attachments = tuple(attachments)
        self.messages = [*messages, Message("user", "", attachments=self.attachments)]
        self.options = options
        self.waits = list(waits)
        self.done = threading.Event()
        self.cancelled = False
        self.progress: PromptProgress | None = None  # the last progress the engine sent
        self.stats: Stats | None = None  # the final chunk's figures
        self.finish: str | None = None  # "stop", "cancelled" or "error"
        self.error: str | None = None
        self.began: float | None = None  # when the engine took it (monotonic)
        self._answer: Any = None
        self._lock = threading.Lock()

    def start(self) -> ReadAhead:
        threading.Thread(target=self.run, daemon=True, name="pocketchat-read-ahead").start()
        return self

    def run(self) -> None:
        """Wait for the engine, read the files ahead, keep the figures; never raises."""
        try:
            for wait in self.waits:
                wait()
            with self._lock:  # cancel() before this point: the engine is never asked
                if self.cancelled:
                    self.finish = "cancelled"
                    return
                self.began = time.monotonic()
                self._answer = self.engine.chat(self.messages, self.options)
            for chunk in self._answer:
                if chunk.progress is not None:
                    self.progress = chunk.progress
                if chunk.finish_reason is not None:
                    self.stats, self.finish, self.error = chunk.stats, chunk.finish_reason, chunk.error
                    break
        except BaseException as exc:  # noqa: BLE001 - the answer after it reads the files anyway
            self.finish, self.error = "error", str(exc) or type(exc).__name__
        finally:
            if self.finish is None:
                self.finish = "cancelled" if self.cancelled else "stop"
            self.done.set()

    @property
    def started(self) -> bool:
        """Whether the engine took it (it is not waiting for the engine any more)."""
        return self.began is not None

    def cancel(self) -> None:
        """Stop it (safe from any thread): not begun, it never asks the engine; else the
        engine stops after the piece it reads and the last chunk says 'cancelled'."""
        with self._lock:
            self.cancelled = True
            answer = self._answer
        if answer is not None and not self.done.is_set():
            try:
                answer.cancel()
            except Exception:  # noqa: BLE001 - a dead engine: the thread ends by itself
                pass

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def close_to_done(self, within: float = FINISH_WITHIN) -> bool:
        """Whether it ends within `within` seconds: done, or begun and either one piece (no
        progress sent: a short read) or with that little left at the rate so far."""
        if self.done.is_set():
            return True
        if not self.started:
            return False
        progress = self.progress
        if progress is None:
            return True
        left = progress.seconds_left
        return left is not None and left <= within

    @property
    def read_tokens(self) -> int:
        """Tokens of the prompt it read up to (the conversation and the files), 0: not read."""
        if self.finish != "stop" or self.stats is None or self.stats.retrieval:
            return 0
        return self.stats.prompt_length
