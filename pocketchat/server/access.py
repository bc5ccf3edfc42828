"""One line per request in `serve`'s output (`AccessLog`, the outermost ASGI layer): method,
path, status, the prompt and generated tokens of the answers it asked, and its seconds.

    POST /v1/chat/completions 200 · prompt 393 (379 cached) · generated 12 · 0.84 s

No prompt text, no query string, no header is ever written (keys and conversations stay out of
logs); a refusal by the guard (401, 403) or the body limit (413) is logged like any other.
`GET /health` is left out: clients poll it, and the server prints its state changes itself.
The figures come from the engine's final chunks: `Streamed` calls `note_answer(stats)` for
each answer, into the request's record (a context variable set here, seen by every task the
request starts).
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable

from pocketchat.engines.types import Stats
from pocketchat.textsafe import one_line

QUIET_PATHS = frozenset({"/health", "/v1/health"})


@dataclass
class Record:
    """What one request's answers read and wrote (summed over its answers)."""

    answers: int = 0
    prompt: int = 0
    cached: int = 0
    generated: int = 0


_record: ContextVar[Record | None] = ContextVar("pocketchat_request", default=None)


def note_answer(stats: Stats) -> None:
    """Count one finished answer's tokens into the request being served (if any)."""
    record = _record.get()
    if record is None:
        return
    record.answers += 1
    record.prompt += stats.prompt_length or stats.prompt_tokens
    record.cached += stats.reused_tokens
    record.generated += stats.generated_tokens


def line(method: str, path: str, status: int | None, record: Record, seconds: float) -> str:
    """The request's log line (see the module docstring)."""
    parts = [f"{method} {path} {status if status is not None else '-'}"]
    if record.answers:
        cached = f" ({record.cached} cached)" if record.cached else ""
        parts += [f"prompt {record.prompt}{cached}", f"generated {record.generated}"]
    parts.append(f"{seconds:.2f} s")
    return one_line(" \u00b7 ".join(parts))


class AccessLog:
    """ASGI middleware: `write(line)` once per HTTP request, when its response has ended (or
    the client left)."""

    def __init__(self, app: Any, write: Callable[[str], None],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.app = app
        self.write = write
        self.clock = clock

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("path") in QUIET_PATHS:
            return await self.app(scope, receive, send)
        started = self.clock()
        record = Record()
        token = _record.set(record)
        status: list[int] = []

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _record.reset(token)
            path = scope.get("path", "")
            self.write(line(scope.get("method", "?"), path, status[0] if status else None,
                            record, self.clock() - started))
