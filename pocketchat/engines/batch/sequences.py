"""The `Engine` over the sequences of one context: every answer the worker serves takes one.

`Sequences` holds N sequence engines (each an `EngineBase` with its own prefix cache, sampler
and sequence of the shared context; N is 1 for the chat and `serve --parallel 1`, and the
same code runs every width). `chat()` takes a free sequence, the one whose last conversation
shares the most leading messages with the new one (as llama.cpp's server picks the slot with
the longest common prefix; one still readying its cache after delivering the previous turn of
the same conversation is waited for), and returns an answer (`SequenceAnswer`) that can be
cancelled alone. Beyond N, `chat()` waits a bounded time for a sequence still settling its
last answer, then refuses (the worker and the server queue before that). The steps that
decode several sequences together are `batcher.Batcher`'s.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

from pocketchat.errors import EngineClosed, EngineError
from pocketchat.engines.batch.batcher import Batcher
from pocketchat.engines.types import ChatOptions, Chunk, Engine, EngineInfo, Message

FREE_WAIT_SECONDS = 30.0  # how long chat() waits for a sequence still settling its last answer

RAW = object()  # a raw prompt's key starts with it: it never matches a conversation's message


class SequenceAnswer:
    """One answer on one sequence (a `types.Answer`): its chunks, cancelled alone."""

    def __init__(self, owner: "Sequences", seq: int, chunks: Iterator[Chunk]) -> None:
        self._owner, self.seq, self._chunks = owner, seq, chunks
        self._released = False

    def __iter__(self) -> "SequenceAnswer":
        return self

    def __next__(self) -> Chunk:
        try:
            chunk = next(self._chunks)
        except BaseException:
            self._release()
            raise
        if chunk.finish_reason is not None:
            self._owner._settling_now(self.seq)
        return chunk

    def cancel(self) -> None:
        self._owner.engines[self.seq].cancel()

    def end_thinking(self) -> None:
        self._owner.engines[self.seq].end_thinking()

    def close(self) -> None:
        try:
            self._chunks.close()  # type: ignore[attr-defined]
        finally:
            self._release()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._owner._release(self.seq)

    def __del__(self) -> None:  # dropped without close (its generator closes itself)
        if not self._released:  # never blocks: the collector may run while the lock is held
            self._released = True
            self._owner._orphan(self.seq)


class Sequences:
    """An `Engine` that answers up to N conversations at once, one per sequence engine."""

    def __init__(self, engines: Sequence[Engine], batcher: Batcher | None = None) -> None:
        """`batcher`: the steps the engines share, when they decode together (its step
        thread, waiting here for a sequence, leads the others' steps meanwhile)."""
        self.engines: list[Any] = list(engines)
        self.batcher = batcher
        first = self.engines[0]
        self.info: EngineInfo = replace(first.info, sequences=len(self.engines))
        self.plan = first.plan
        self.n_ctx = first.n_ctx
        self._lock = threading.Condition(threading.Lock())
        self._busy: set[int] = set()
        self._settling: set[int] = set()  # answers delivered, the sequence readying its cache
        self._orphans: list[int] = []  # sequences of answers dropped unclosed (`_orphan`)
        self._last: dict[int, tuple[Any, ...]] = {}
        self._used: dict[int, float] = {}
        self._closed = False

    @property
    def sequences(self) -> int:
        """How many answers run at once (`info.sequences`)."""
        return len(self.engines)

    @property
    def busy(self) -> int:
        with self._lock:
            self._free_orphans()
            return len(self._busy)

    def __getattr__(self, name: str) -> Any:  # template traits etc. of the first sequence
        if name.startswith("_") or name == "engines":
            raise AttributeError(name)
        return getattr(self.engines[0], name)

    def _shared(self, k: int, messages: tuple[Any, ...]) -> int:
        """The leading messages sequence `k`'s last conversation shares with `messages`."""
        n = 0
        for a, b in zip(self._last.get(k, ()), messages, strict=False):
            if a != b:
                break
            n += 1
        return n

    def _ready(self, messages: tuple[Any, ...]) -> bool:
        """A sequence is free, and none still settling shares more with `messages` (the
        conversation's own sequence, readying its cache for this very request: worth a wait)."""
        self._free_orphans()
        free = [k for k in range(len(self.engines)) if k not in self._busy]
        if not free:
            return False
        best = max(self._shared(k, messages) for k in free)
        return all(self._shared(k, messages) <= best for k in self._settling)

    def _pick(self, messages: tuple[Any, ...]) -> int:
        free = [k for k in range(len(self.engines)) if k not in self._busy]
        if not free:
            raise EngineError(f"all {len(self.engines)} sequences are answering",
                              hint="Wait for an answer to end, or serve with a larger --parallel.")
        return max(free, key=lambda k: (self._shared(k, messages), -self._used.get(k, 0.0)))

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None
             ) -> SequenceAnswer:
        messages = tuple(messages)
        return self._run(messages, lambda engine: engine.chat(messages, options))

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> SequenceAnswer:
        """A raw continuation (`base.EngineBase.complete`) on a free sequence."""
        key = (RAW, prompt if isinstance(prompt, str) else tuple(prompt))
        return self._run(key, lambda engine: engine.complete(prompt, options))

    def _run(self, messages: tuple[Any, ...], answer: Callable[[Any], Iterator[Chunk]]
             ) -> SequenceAnswer:
        """Run `answer` on the free sequence whose last request shares the most leading items
        with `messages` (a conversation's messages, or a raw prompt's key)."""
        if self._closed:
            raise EngineClosed()
        wait = FREE_WAIT_SECONDS
        if self.batcher is not None and self.batcher.leading:  # the others' steps go on
            def ready() -> bool:
                with self._lock:
                    return self._ready(messages)
            self.batcher.idle(ready, wait)
            wait = 0.0
        with self._lock:
            # A sequence whose answer was delivered may still be settling (or ending after a
            # cancel) when the next request comes: wait for it, a bounded time.
            self._lock.wait_for(lambda: self._ready(messages), wait)
            k = self._pick(messages)
            self._busy.add(k)
            self._last[k] = messages
            self._used[k] = time.monotonic()
        try:
            chunks = answer(self.engines[k])
        except BaseException:
            self._release(k)  # the answer never started: its sequence is free again
            raise
        return SequenceAnswer(self, k, chunks)

    def _settling_now(self, seq: int) -> None:
        with self._lock:
            self._settling.add(seq)

    def _release(self, seq: int) -> None:
        with self._lock:
            self._busy.discard(seq)
            self._settling.discard(seq)
            self._lock.notify_all()

    def _orphan(self, seq: int) -> None:
        """Free the sequence of an answer dropped unclosed: now when the lock is free, else
        at the next look at the free sequences (`_ready`)."""
        self._orphans.append(seq)
        if self._lock.acquire(blocking=False):
            try:
                self._free_orphans()
                self._lock.notify_all()
            finally:
                self._lock.release()

    def _free_orphans(self) -> None:
        """(With the lock held.)"""
        while self._orphans:
            seq = self._orphans.pop()
            self._busy.discard(seq)
            self._settling.discard(seq)

    def cancel(self) -> None:
        for engine in self.engines:
            engine.cancel()

    def end_thinking(self) -> None:
        for engine in self.engines:
            engine.end_thinking()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for engine in self.engines:
            engine.cancel()
        for engine in reversed(self.engines):  # the first owns the model: freed last
            engine.close()

    def status(self) -> dict:
        """The engine's live figures (the prompt cache the sequences share)."""
        return self.engines[0].status()

    def save_state(self, path: Any) -> int:
        """The state of the sequence that answered last (the conversation just answered, when
        no other answer began since), once it has settled."""
        with self._lock:
            if not self._used:
                return 0
            k = max(self._used, key=lambda seq: self._used[seq])
            self._lock.wait_for(lambda: k not in self._busy, FREE_WAIT_SECONDS)
        return self.engines[k].save_state(path)

    def load_state(self, path: Any) -> str | None:
        """Into the free sequence used longest ago: the next answer that shares nothing more
        with another sequence takes it (`_pick`)."""
        with self._lock:
            free = [k for k in range(len(self.engines)) if k not in self._busy]
            if not free:
                return "every sequence is answering: the conversation is read again"
            k = min(free, key=lambda seq: self._used.get(seq, 0.0))
            self._last[k] = ()
        return self.engines[k].load_state(path)
