"""A generating endpoint as a plain ASGI callable, whatever its protocol: it reads the body
(413 past the limit), lets the protocol validate it into the request model, answers within one
turn of the engine, and watches the connection while it waits and while it answers: a client
that goes away (http.disconnect) cancels the request at once, queued or generating; a server
that stops (`EngineHost.close_doors`) ends it at once with the protocol's error. An answer's
status is decided on the engine's first chunk, before any header is sent, so an error found
while reading the prompt (context overflow, an engine crash) is a proper HTTP status even for
a streaming request. Each protocol (protocols/NAME/endpoints.py) subclasses `Endpoint` with
its `parse`, its `answer` and its error shape (`error_body`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

import anyio

from pocketchat.engines.types import Chunk
from pocketchat.errors import (ApiError, ContextOverflow, EngineCrashed, PocketchatError,
                               UnsupportedRequest)
from pocketchat.server.guard import send_json
from pocketchat.server.host import EngineHost
from pocketchat.server.turn import Run, Turn, stopping
from pocketchat.server.protocols.openai.encode import error_body as openai_error_body
from pocketchat.server.reply import Delta, Reply
from pocketchat.server.thinking import ServerThinking

MAX_BODY_BYTES = 4 * 1024 * 1024  # files come base64 inside it: up to about 3 MiB each
log = logging.getLogger("pocketchat.server")
DRAIN_FACTOR = 16
STREAM_GRACE = 0.5  # seconds a stream under way has to end by itself when the server stops
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]


NDJSON_HEADERS = [(b"content-type", b"application/x-ndjson"), (b"cache-control", b"no-cache"),
                  (b"x-accel-buffering", b"no")]


class ClientGone(Exception):
    """The client closed the connection before its request was read."""


class Responder:
    """Sends one response: a JSON body, or server-sent events; errors in the protocol's shape
    (OpenAI's unless given; `error_event`: a started stream's error as a named event)."""

    def __init__(self, send: Callable,
                 error_body: Callable[[ApiError], Any] = openai_error_body,
                 error_event: Callable[[ApiError], tuple[str, Any]] | None = None) -> None:
        self._send = send
        self._error_body = error_body
        self._error_event = error_event
        self.started = False
        self.ended = False
        self.lines = False  # a stream of JSON lines (Ollama's), not server-sent events

    async def json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.started = self.ended = True
        await send_json(self._send, status, body, headers)

    async def start_events(self) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def start_lines(self) -> None:
        """Start a stream of newline-delimited JSON objects (Ollama's streaming)."""
        self.started = self.lines = True
        await self._send({"type": "http.response.start", "status": 200, "headers": NDJSON_HEADERS})

    async def line(self, data: Any) -> None:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        await self._send({"type": "http.response.body", "body": (text + "\n").encode(),
                          "more_body": True})

    async def event(self, data: Any) -> None:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False,
                                                                separators=(",", ":"))
        await self._send({"type": "http.response.body", "body": f"data: {text}\n\n".encode(),
                          "more_body": True})

    async def named(self, name: str, data: Any) -> None:
        """One named event (`event: NAME`), as Anthropic's and the Responses API's streams send."""
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        await self._send({"type": "http.response.body", "more_body": True,
                          "body": f"event: {name}\ndata: {text}\n\n".encode()})

    async def comment(self, text: str) -> None:
        """An SSE comment (clients skip it): keeps a connection alive while a prompt is read."""
        await self._send({"type": "http.response.body", "body": f": {text}\n\n".encode(),
                          "more_body": True})

    async def end(self) -> None:
        if self.started and not self.ended:
            self.ended = True
            await self._send({"type": "http.response.body", "body": b""})

    async def fail(self, exc: ApiError) -> None:
        if not self.started:
            await self.json(exc.status, self._error_body(exc), exc.headers)
        elif not self.ended:
            if self.lines:
                await self.line(self._error_body(exc))
            elif self._error_event is None:
                await self.event(self._error_body(exc))
            else:
                await self.named(*self._error_event(exc))
            await self.end()


async def read_body(scope: dict, receive: Callable, limit: int) -> bytes:
    """The request body, or 413 when it is larger than `limit` bytes.

    An oversized body is read on and thrown away (up to DRAIN_FACTOR x limit), so the client
    gets the 413 rather than a connection reset in the middle of its upload.
    """
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        body = message.get("body", b"")
        size += len(body)
        if size <= limit:
            parts.append(body)
        if not message.get("more_body") or size > DRAIN_FACTOR * limit:
            break
    if size > limit:
        raise ApiError(f"the request body is larger than the limit of {_size(limit)}: a file "
                       "sent in it (base64, a third larger than the file) can be up to about "
                       f"{_size(limit * 3 // 4)}", status=413, code="request_too_large")
    return b"".join(parts)


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n // 1024} KiB"


def unsupported_error(exc: UnsupportedRequest) -> ApiError:
    """A request the engine cannot honour as asked: 400 naming the part."""
    return ApiError(exc.message, status=400, code=exc.code, param=exc.param,
                    hint=exc.hint or None)


def chunk_error(chunk: Chunk) -> ApiError:
    """The HTTP error for an answer that ended with finish_reason 'error'."""
    failure = chunk.failure
    if isinstance(failure, UnsupportedRequest):
        return unsupported_error(failure)
    if isinstance(failure, ContextOverflow):
        return ApiError(
            f"the conversation needs {failure.prompt_tokens} prompt tokens but the model's context "
            f"has room for {failure.limit} (of {chunk.stats.context_limit}; the rest is kept for "
            "the answer)", status=400, code="context_length_exceeded", param="messages",
            hint="Shorten the conversation or lower max_tokens, or restart the server with a larger --ctx.")
    return ApiError(f"the model failed: {chunk.error or 'unknown error'}", status=500,
                    type="server_error", code="engine_error")


def engine_error(exc: PocketchatError) -> ApiError:
    """An error the engine raised for this request: 500 in its own words (a template that
    rejects the conversation, say); the engine is ready for the next one."""
    return ApiError(f"the model could not answer: {exc.message}", status=500, type="server_error",
                    code="engine_error", hint=exc.hint or None)


def crash_error(exc: EngineCrashed) -> ApiError:
    return ApiError(f"{exc.message}; the model is being restarted for the next request",
                    status=500, type="server_error", code="engine_crashed")


def refuse_dropped(first: Chunk) -> None:
    """A conversation the engine had to shorten is refused: the client must not think the
    model saw what it did not."""
    dropped = first.stats.dropped_messages
    if dropped:
        raise ApiError(
            f"the conversation does not fit the model's context of {first.stats.context_limit} tokens "
            f"with room for the answer: its {dropped} oldest messages would have to be left out",
            status=400, code="context_length_exceeded", param="messages",
            hint="Shorten the conversation or lower max_tokens, or restart the server with a larger --ctx.")


class Endpoint:
    """A generating endpoint (an ASGI app: it watches the connection while it answers).

    Reads and validates the body, then answers within one turn of the engine; a client that
    goes away cancels the request at once, queued or generating.
    """

    def __init__(self, host: EngineHost, model_id: str, aliases: Sequence[str] = (),
                 max_body: int = MAX_BODY_BYTES) -> None:
        self.host = host
        self.model_id = model_id
        self.names = {model_id, *aliases}
        self.max_body = max_body

    # The default thinking and the answers a client may end the thinking of (create_app
    # gives every endpoint the app's one; this one serves endpoints made alone).
    thinking: ServerThinking = ServerThinking()
    error_body: Callable[[ApiError], Any] = staticmethod(openai_error_body)  # the protocol's
    error_event: Callable[[ApiError], tuple[str, Any]] | None = None  # ... on a started stream

    def parse(self, body: bytes) -> Any:
        raise NotImplementedError

    async def answer(self, request: Any, out: Responder) -> None:
        raise NotImplementedError

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        out = Responder(send, self.error_body, self.error_event)
        try:  # any model name is answered: agents send their own ids
            request = self.parse(await read_body(scope, receive, self.max_body))
        except ApiError as exc:
            return await out.fail(exc)
        except ClientGone:
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
            tg.start_soon(_cancel_on_stop, self.host, tg.cancel_scope, out)
            try:
                await self.answer(request, out)
            except ApiError as exc:
                await out.fail(exc)
            except UnsupportedRequest as exc:
                await out.fail(unsupported_error(exc))
            except EngineCrashed as exc:
                await out.fail(crash_error(exc))
            except PocketchatError as exc:  # the engine refused or failed: its own words
                await out.fail(engine_error(exc))
            except Exception as exc:  # noqa: BLE001 - a bug: said plainly, logged, never a repr
                log.exception("the request failed")
                await out.fail(ApiError(f"internal error ({type(exc).__name__}); see the server's "
                                        "log", status=500, type="server_error", code="internal_error"))
            finally:
                tg.cancel_scope.cancel()
        if self.host.closing and not out.ended:  # the server stops: the protocol's error, now
            await out.fail(stopping())

    async def end_stream(self, out: Responder, done: Any = "[DONE]") -> None:
        """The stream's last events: when the server is stopping, its error first (the
        protocol's shape), then `done`."""
        if self.host.closing:
            await out.event(self.error_body(stopping()))
        await out.event(done)
        await out.end()

    def meta(self, prefix: str) -> dict[str, Any]:
        return {"id": f"{prefix}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": self.model_id}


async def answer_one(turn: Turn, run: Run, stops: Sequence[str],
                     on_delta: Callable[[Delta, bool], Awaitable[None]],
                     on_progress: Callable[[Chunk], Awaitable[None]] | None = None, *,
                     thinking: ServerThinking | None = None, key: str | None = None) -> Reply:
    """One answer within a turn, stop sequences applied: `on_delta(delta, first)` gets each
    piece (the first once the engine has read the prompt); errors before that are raised.
    While a long prompt is read, `on_progress(chunk)` (when given) gets its progress chunks.
    With `thinking` and `key`, a client may end the answer's thinking by that id meanwhile."""
    async with turn.answer(run) as answer:
        with (thinking or Endpoint.thinking).held(key, answer) as handle:
            return await _answer_one(answer, stops, on_delta, on_progress, handle.note)


async def _answer_one(answer: Any, stops: Sequence[str],
                      on_delta: Callable[[Delta, bool], Awaitable[None]],
                      on_progress: Callable[[Chunk], Awaitable[None]] | None,
                      note: Callable[[Chunk], None]) -> Reply:
    chunks = aiter(answer)
    first = await anext(chunks)
    while first.progress is not None:  # the prompt being read: no text yet
        refuse_dropped(first)
        if on_progress is not None:
            await on_progress(first)
        first = await anext(chunks)
    if first.finish_reason == "error":
        raise chunk_error(first)
    refuse_dropped(first)
    reply, last, opening = Reply(stops), first, True
    async for last in _with_first(first, chunks):
        if last.progress is not None:
            continue
        note(last)
        await on_delta(reply.feed(last), opening)
        opening = False
        if reply.stopped:
            answer.cancel()
    if reply.finish_reason == "error":
        raise chunk_error(last)
    return reply


async def quiet(_delta: Delta, _first: bool) -> None:
    """A whole (non-streaming) answer sends nothing while it is written."""


async def _rest(first: Chunk, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    """The chunks after `first` (none when `first` ended the answer)."""
    if first.finish_reason is None:
        async for chunk in chunks:
            yield chunk


async def _with_first(first: Chunk, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    yield first
    async for chunk in _rest(first, chunks):
        yield chunk


async def _cancel_on_stop(host: EngineHost, scope: anyio.CancelScope, out: Responder) -> None:
    """The server stops: a request not yet answering ends now; a stream under way first gets
    STREAM_GRACE seconds to end as a stream does (its answer is cancelled in the engine)."""
    await host.wait_stopping()
    if out.started:
        await anyio.sleep(STREAM_GRACE)
    scope.cancel()


async def _cancel_on_disconnect(receive: Callable, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


