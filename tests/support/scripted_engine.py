"""A fake Engine for UI tests: yields scripted answers token by token, with stats.

It honours `cancel()`, can hold an answer mid-way until released (so a test can look at the
screen mid-stream or press Esc), and can crash the way a dead worker does (EngineCrashed).
It thinks as the real engines do with a budget: the thought is closed after
`ChatOptions.thinking_budget` of its tokens, or at once on `end_thinking()` (which also lets
an answer held in its thought go on), with CLOSING as its last line, and the stats count the
thought's tokens (`thinking_tokens`) and say how it ended (`thinking_end`).
Stats are computed from a fixed per-token time, so figures on screen are deterministic.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Generator, Iterator, Sequence

from pocketchat.errors import EngineCrashed
from pocketchat.engines.types import ChatOptions, Chunk, EngineInfo, Message, Stats

TOKEN = re.compile(r"\s*\S+|\s+")
CLOSING = "\nTime is up, so I answer now."  # the line a closed thought ends with


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@dataclass
class Reply:
    text: str
    thinking: str = ""
    hold_after: int | None = None  # block after this many tokens until released or cancelled
    crash_after: int | None = None  # raise EngineCrashed after this many tokens
    finish_reason: str = "stop"
    error: str | None = None
    context_used: int | None = None
    dropped_messages: int = 0
    # Drafts (`--draft`): each step that verified a draft emitted this many tokens on average
    # (accepted drafted tokens and one); 0: no draft step ran.
    draft_per_step: float = 0.0


class StreamAnswer:
    """An `Answer` over a chunk iterator of an engine that runs one answer at a time (its
    `cancel` and `end_thinking` are the answer's)."""

    def __init__(self, chunks: Iterator[Chunk], engine: Any) -> None:
        self._chunks, self._engine = chunks, engine

    def __iter__(self) -> "StreamAnswer":
        return self

    def __next__(self) -> Chunk:
        return next(self._chunks)

    def cancel(self) -> None:
        self._engine.cancel()

    def end_thinking(self) -> None:
        self._engine.end_thinking()

    def close(self) -> None:
        if isinstance(self._chunks, Generator):  # a plain iterator has nothing to free
            self._chunks.close()


@dataclass
class ScriptedEngine:
    replies: list[Reply] = field(default_factory=lambda: [Reply("Hello from the script.")])
    info: EngineInfo = field(
        default_factory=lambda: EngineInfo(
            backend="llama.cpp", model="Scripted-1B", placement="CPU, 2 threads", n_ctx=4096
        )
    )
    seconds_per_token: float = 0.025  # 40 tok/s on screen
    ttft: float = 0.125
    delay: float = 0.0  # real time between tokens
    pid: int | None = None

    def __post_init__(self) -> None:
        self.calls: list[tuple[list[Message], ChatOptions | None]] = []
        self.release = threading.Event()
        self.held = threading.Event()
        self._cancel = threading.Event()
        self._end_thought = threading.Event()
        self.closed = False
        self.cancels = 0
        self.thoughts_ended = 0  # end_thinking() calls

    def chat(
        self, messages: Sequence[Message], options: ChatOptions | None = None
    ) -> StreamAnswer:
        if self.closed:
            raise EngineCrashed("the engine is closed")
        self.calls.append((list(messages), options))
        reply = self.replies[min(len(self.calls) - 1, len(self.replies) - 1)]
        self._cancel.clear()
        self._end_thought.clear()
        return StreamAnswer(self._stream(messages, reply, options), self)

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> StreamAnswer:
        """The script's next reply to the prompt as one user message."""
        return self.chat([Message("user", str(prompt))], options)

    def status(self) -> dict:
        return {}

    def _stream(
        self, messages: Sequence[Message], reply: Reply, options: ChatOptions | None
    ) -> Iterator[Chunk]:
        prompt_tokens = sum(len(tokens(m.content)) + 4 for m in messages)
        thinking = tokens(reply.thinking) if (options is None or options.thinking) else []
        budget = options.thinking_budget if options is not None else None
        pieces = [("thinking", t) for t in thinking] + [("text", t) for t in tokens(reply.text)]
        n = 0
        self._thought = [0, ""]  # [tokens of the thought, how it ended]
        for kind, piece in pieces:
            if reply.crash_after is not None and n >= reply.crash_after:
                raise EngineCrashed("the worker process died (signal 9)", exitcode=-9)
            if reply.hold_after is not None and n == reply.hold_after:
                self.held.set()
                while not (self.release.wait(0.01) or self._cancel.is_set()
                           or (kind == "thinking" and self._end_thought.is_set())):
                    pass
            if self._cancel.is_set():
                yield Chunk(stats=self._stats(prompt_tokens, n, reply), finish_reason="cancelled")
                return
            if kind == "thinking" and self._thought[1]:
                continue  # the thought was closed: the answer follows
            if kind == "thinking" and (self._end_thought.is_set() or (
                    budget is not None and self._thought[0] >= budget)):
                n += len(tokens(CLOSING))
                self._thought = [self._thought[0] + len(tokens(CLOSING)),
                                 "user" if self._end_thought.is_set() else "budget"]
                yield Chunk(thinking=CLOSING, stats=self._stats(prompt_tokens, n, reply))
                continue
            if kind == "text" and thinking and not self._thought[1]:
                self._thought[1] = "model"
            if self.delay:
                time.sleep(self.delay)
            n += 1
            if kind == "thinking":
                self._thought[0] += 1
            stats = self._stats(prompt_tokens, n, reply)
            yield Chunk(text=piece, stats=stats) if kind == "text" else Chunk(
                thinking=piece, stats=stats
            )
        cap = options is not None and options.max_tokens is not None and n >= options.max_tokens
        why = {"length": "cap" if cap else "context"}.get(reply.finish_reason, reply.finish_reason)
        yield Chunk(  # the engine says why the answer stopped, as the real ones do
            stats=replace(self._stats(prompt_tokens, n, reply), stop_reason=why),  # type: ignore[arg-type]
            finish_reason=reply.finish_reason,  # type: ignore[arg-type]
            error=reply.error,
        )

    def _stats(self, prompt_tokens: int, n: int, reply: Reply) -> Stats:
        used = reply.context_used if reply.context_used is not None else prompt_tokens + n
        steps = round(n / reply.draft_per_step) if reply.draft_per_step else 0
        return Stats(
            prompt_tokens=prompt_tokens,
            prompt_seconds=0.1,
            generated_tokens=n,
            decode_seconds=n * self.seconds_per_token,
            ttft_seconds=self.ttft if n else None,
            context_used=used,
            context_limit=self.info.n_ctx,
            dropped_messages=reply.dropped_messages,
            thinking_tokens=getattr(self, "_thought", (0, ""))[0],
            thinking_end=getattr(self, "_thought", (0, ""))[1],  # type: ignore[arg-type]
            draft_steps=steps, drafted_tokens=4 * steps, accepted_tokens=n - steps if steps else 0,
        )

    def cancel(self) -> None:
        self.cancels += 1
        self._cancel.set()

    def end_thinking(self) -> None:
        self.thoughts_ended += 1
        self._end_thought.set()

    def close(self) -> None:
        self.closed = True
        self._cancel.set()


class Factory:
    """An engine factory that hands out scripted engines and counts the starts."""

    def __init__(self, *engines: ScriptedEngine, fail: list[BaseException] | None = None) -> None:
        self.engines = list(engines) or [ScriptedEngine()]
        self.fail = list(fail or [])
        self.started: list[ScriptedEngine] = []

    def __call__(self) -> ScriptedEngine:
        if self.fail:
            raise self.fail.pop(0)
        engine = self.engines[min(len(self.started), len(self.engines) - 1)]
        engine.closed = False
        self.started.append(engine)
        return engine


class HeldEngine:
    """A fake for the server's host: each answer holds after its first chunk until `release`
    is set (cancel sets it); `sequences` and `info` are what a WorkerEngine says once loaded
    (`info.sequences`: how many answers it runs at once)."""

    def __init__(self, release: threading.Event, *, sequences: int = 8,
                 info: EngineInfo | None = None) -> None:
        self.release = release
        self.info = replace(info or EngineInfo(backend="llama.cpp", model="held",
                                               placement="CPU", n_ctx=512), sequences=sequences)

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None
             ) -> StreamAnswer:
        return StreamAnswer(self._held(), self)

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> StreamAnswer:
        return StreamAnswer(self._held(), self)

    def _held(self) -> Iterator[Chunk]:
        yield Chunk(text="a")
        self.release.wait(30)
        yield Chunk(stats=Stats(), finish_reason="stop")

    def cancel(self) -> None:
        self.release.set()

    def end_thinking(self) -> None:
        pass

    def status(self) -> dict:
        return {}

    def close(self) -> None:
        pass
