"""The OpenAI-compatible HTTP API over one engine, as a Starlette (ASGI) application.

    POST /v1/chat/completions   streaming (SSE) or not; see protocols/openai/ for the fields
    POST /v1/completions        the legacy endpoint: a raw prompt continued
    GET  /v1/models             the one model this server runs
    GET  /health                {"status": "loading" | "ready" | "error", ...} (no key needed)
    GET  /openapi.json          every endpoint's request and response (openapi.py)

The chat endpoint is a plain ASGI callable so that it can watch the connection while it
waits and while it answers: a client that goes away (http.disconnect) cancels the request at
once, whether it is still queued or already generating. An answer's status is decided on the
engine's first chunk, before any header is sent, so an error found while reading the prompt
(context overflow, an engine crash) is a proper HTTP status even for a streaming request;
a streaming request with `"return_progress": true` (llama.cpp's field) gets events with a
`prompt_progress` object while a long prompt is read, so its headers go with the first of them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from dataclasses import replace
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pocketchat.engines.types import Chunk
from pocketchat.errors import (ApiError, ContextOverflow, EngineCrashed, PocketchatError,
                               UnsupportedRequest)
from pocketchat.server.cors import Cors, CorsPolicy, Preflight
from pocketchat.server.guard import Guard, send_error, send_json
from pocketchat.server.host import EngineHost, Run, Turn, chat_run, completion_run, stopping
from pocketchat.server.openapi import document
from pocketchat.server.protocols.openai.encode import (error_body, legacy_logprobs, logprob_entries,
                                                       prompt_progress, timings, tool_call_entries,
                                                       usage)
from pocketchat.server.protocols.openai.requests import (parse_chat_request,
                                                         parse_completion_request)
from pocketchat.server.protocols.anthropic import encode as anthropic
from pocketchat.server.protocols.anthropic.requests import (MessagesRequest, parse_count_request,
                                                            parse_messages_request)
from pocketchat.server.protocols.responses import encode as responses
from pocketchat.server.protocols.responses.requests import ResponsesRequest, responses_request
from pocketchat.server.protocols.responses.requests import check as check_responses
from pocketchat.server.protocols.responses.store import ResponseStore
from pocketchat.server.protocols.validate import parse_json
from pocketchat.server.request import (ChatRequest, CompletionRequest, Prompt, combined,
                                       seeded)
from pocketchat.server.reply import Delta, Reply

MAX_BODY_BYTES = 4 * 1024 * 1024
log = logging.getLogger("pocketchat.server")
DRAIN_FACTOR = 16
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]


ErrorShape = tuple[Callable[[ApiError], dict], Callable[[ApiError], tuple[str, dict]]]


class ClientGone(Exception):
    """The client closed the connection before its request was read."""


class Responder:
    """Sends one response: a JSON body, or server-sent events; errors in the protocol's shape
    (OpenAI's unless `errors` gives another: (JSON body, (event name, data) on a stream))."""

    def __init__(self, send: Callable, errors: "ErrorShape | None" = None) -> None:
        self._send = send
        self.started = False
        self.ended = False
        self.errors = errors

    async def json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.started = self.ended = True
        await send_json(self._send, status, body, headers)

    async def start_events(self) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

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
            body = error_body(exc) if self.errors is None else self.errors[0](exc)
            await self.json(exc.status, body, exc.headers)
        elif not self.ended:
            if self.errors is None:
                await self.event(error_body(exc))
            else:
                await self.named(*self.errors[1](exc))
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
        raise ApiError(f"the request body is larger than the limit of {limit // 1024} KiB",
                       status=413, code="request_too_large")
    return b"".join(parts)


def unsupported_error(exc: UnsupportedRequest) -> ApiError:
    """A request the engine cannot honour as asked: 400 naming the part."""
    return ApiError(exc.message, status=400, code="unsupported_parameter", param=exc.param,
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

    errors: ErrorShape | None = None  # the protocol's error shape (None: OpenAI's)

    def __init__(self, host: EngineHost, model_id: str, aliases: Sequence[str] = (),
                 max_body: int = MAX_BODY_BYTES) -> None:
        self.host = host
        self.model_id = model_id
        self.names = {model_id, *aliases}
        self.max_body = max_body

    def parse(self, body: bytes) -> Any:
        raise NotImplementedError

    async def answer(self, request: Any, out: Responder) -> None:
        raise NotImplementedError

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        out = Responder(send, self.errors)
        try:  # any model name is answered: agents send their own ids (issue 30)
            request = self.parse(await read_body(scope, receive, self.max_body))
        except ApiError as exc:
            return await out.fail(exc)
        except ClientGone:
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
            tg.start_soon(_cancel_on_stop, self.host, tg.cancel_scope)
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

    def meta(self, prefix: str) -> dict[str, Any]:
        return {"id": f"{prefix}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": self.model_id}


async def answer_one(turn: Turn, run: Run, stops: Sequence[str],
                     on_delta: Callable[[Delta, bool], Awaitable[None]],
                     on_progress: Callable[[Chunk], Awaitable[None]] | None = None) -> Reply:
    """One answer within a turn, stop sequences applied: `on_delta(delta, first)` gets each
    piece (the first once the engine has read the prompt); errors before that are raised.
    While a long prompt is read, `on_progress(chunk)` (when given) gets its progress chunks."""
    async with turn.answer(run) as answer:
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
            await on_delta(reply.feed(last), opening)
            opening = False
            if reply.stopped:
                answer.cancel()
        if reply.finish_reason == "error":
            raise chunk_error(last)
        return reply


class ChatCompletions(Endpoint):
    """POST /v1/chat/completions."""

    def parse(self, body: bytes) -> ChatRequest:
        return parse_chat_request(body)

    async def answer(self, request: ChatRequest, out: Responder) -> None:
        meta = self.meta("chatcmpl")
        base = {**meta, "object": "chat.completion.chunk", "system_fingerprint": None}
        replies: list[Reply] = []
        async with self.host.turn() as turn:
            for index in range(request.n):
                run = chat_run(request.messages, seeded(request.options, index))
                if request.stream:
                    replies.append(await self._stream_choice(request, base, index, turn, run, out))
                else:
                    replies.append(await answer_one(turn, run, request.stop, _quiet))
        stats = combined([r.stats for r in replies])
        if not request.stream:
            return await out.json(200, {
                **meta, "object": "chat.completion", "system_fingerprint": None,
                "choices": [self._choice(i, r, request) for i, r in enumerate(replies)],
                "usage": usage(stats), "timings": timings(stats),
            })
        if request.include_usage:
            await out.event({**base, "choices": [], "usage": usage(stats)})
        await out.event("[DONE]")
        await out.end()

    @staticmethod
    def _choice(index: int, reply: Reply, request: ChatRequest) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": reply.text if reply.text or not reply.tool_calls else None}
        if reply.thinking:
            message["reasoning_content"] = reply.thinking
        if reply.tool_calls:
            message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"}
                                     for c in tool_call_entries(reply.tool_calls)]
        logprobs = {"content": logprob_entries(reply.logprobs), "refusal": None} if request.logprobs else None
        return {"index": index, "message": message, "logprobs": logprobs,
                "finish_reason": reply.finish_reason}

    async def _stream_choice(self, request: ChatRequest, base: dict, index: int, turn: Turn,
                             run: Run, out: Responder) -> Reply:
        calls = 0

        def event(delta: dict, finish: str | None = None, logprobs: Any = None, **extra: Any) -> dict:
            return {**base, "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                         "finish_reason": finish}], **extra}

        async def on_delta(d: Delta, first: bool) -> None:
            nonlocal calls
            if first:
                if not out.started:
                    await out.start_events()
                await out.event(event({"role": "assistant", "content": ""}))
            delta: dict[str, Any] = {k: v for k, v in (("reasoning_content", d.reasoning),
                                                       ("content", d.content)) if v}
            if d.tool_calls:
                delta["tool_calls"] = tool_call_entries(d.tool_calls, calls)
                calls += len(d.tool_calls)
            lps = d.logprobs if request.logprobs else ()
            if delta or lps:
                await out.event(event(delta, logprobs={"content": logprob_entries(lps), "refusal": None}
                                      if lps else None))

        async def on_progress(chunk: Chunk) -> None:  # llama.cpp's shape (return_progress)
            if not out.started:
                await out.start_events()
            assert chunk.progress is not None
            await out.event(event({"role": "assistant", "content": None},
                                  prompt_progress=prompt_progress(chunk.progress, chunk.stats)))

        reply = await answer_one(turn, run, request.stop, on_delta,
                                 on_progress if request.return_progress else None)
        await out.event(event({}, reply.finish_reason, timings=timings(reply.stats)))
        return reply


class Completions(Endpoint):
    """POST /v1/completions: the legacy endpoint, a raw prompt continued."""

    def parse(self, body: bytes) -> CompletionRequest:
        return parse_completion_request(body)

    async def answer(self, request: CompletionRequest, out: Responder) -> None:
        meta = {**self.meta("cmpl"), "object": "text_completion"}
        replies: list[Reply] = []
        asked = [p for p in request.prompts for _ in range(request.n)]
        async with self.host.turn() as turn:
            for index, prompt in enumerate(asked):
                replies.append(await self._choice(request, prompt, meta, index, turn, out))
        stats = combined([r.stats for r in replies])
        if len(request.prompts) > 1:  # every prompt counts once
            firsts = [r.stats for r in replies[::request.n]]
            stats = replace(stats, prompt_length=sum(s.prompt_length for s in firsts),
                            reused_tokens=sum(s.reused_tokens for s in firsts))
        if not request.stream:
            choices = []
            for i, r in enumerate(replies):
                head = asked[i] if request.echo and isinstance(asked[i], str) else ""
                logprobs = (legacy_logprobs(r.logprobs, len(head))
                            if request.logprobs is not None else None)
                choices.append({"index": i, "text": head + r.text, "logprobs": logprobs,
                                "finish_reason": _legacy_finish(r.finish_reason)})
            return await out.json(200, {**meta, "choices": choices, "usage": usage(stats)})
        if request.include_usage:
            await out.event({**meta, "choices": [], "usage": usage(stats)})
        await out.event("[DONE]")
        await out.end()

    async def _choice(self, request: CompletionRequest, prompt: Prompt, meta: dict, index: int,
                      turn: Turn, out: Responder) -> Reply:
        run = completion_run(prompt, seeded(request.options, index % request.n))
        echo = prompt if request.echo and isinstance(prompt, str) else ""
        offset = len(echo)

        def event(text: str, finish: str | None = None, logprobs: Any = None) -> dict:
            return {**meta, "choices": [{"index": index, "text": text, "logprobs": logprobs,
                                         "finish_reason": finish}]}

        async def on_delta(d: Delta, first: bool) -> None:
            nonlocal offset
            if not request.stream:
                return
            if first:
                if not out.started:
                    await out.start_events()
                if echo:
                    await out.event(event(echo))
            lps = legacy_logprobs(d.logprobs, offset) if request.logprobs is not None else None
            if d.content:
                await out.event(event(d.content, logprobs=lps))
                offset += len(d.content)

        async def on_progress(chunk: Chunk) -> None:
            if not out.started:
                await out.start_events()
            assert chunk.progress is not None
            await out.event({**event(""), "prompt_progress": prompt_progress(chunk.progress,
                                                                             chunk.stats)})

        reply = await answer_one(turn, run, request.stop, on_delta,
                                 on_progress if request.return_progress else None)
        if request.stream:
            await out.event(event("", _legacy_finish(reply.finish_reason)))
        return reply


def _legacy_finish(reason: str | None) -> str | None:
    """The completions endpoint knows only "stop" and "length"."""
    return "length" if reason == "length" else ("stop" if reason is not None else None)


async def _quiet(_delta: Delta, _first: bool) -> None:
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


class Messages(Endpoint):
    """POST /v1/messages: Anthropic's Messages API (protocols/anthropic/)."""

    errors = (anthropic.error_body, anthropic.error_event)

    def parse(self, body: bytes) -> MessagesRequest:
        return parse_messages_request(body)

    async def answer(self, request: MessagesRequest, out: Responder) -> None:
        chat, mid = request.chat, anthropic.message_id()
        events = anthropic.MessageStream(mid, request.model, request.show_thinking)

        async def begin(stats: Any) -> None:
            if not out.started:
                await out.start_events()
                for event in events.start(stats):
                    await out.named(*event)

        async def on_delta(d: Delta, _first: bool) -> None:
            if chat.stream:
                await begin(d.stats)
                for event in events.delta(d.reasoning, d.content, d.tool_calls):
                    await out.named(*event)

        async def on_progress(chunk: Chunk) -> None:
            await begin(chunk.stats)
            await out.named(*events.ping())

        async with self.host.turn() as turn:
            reply = await answer_one(turn, chat_run(chat.messages, chat.options), chat.stop,
                                     on_delta, on_progress if chat.stream else None)
        if not chat.stream:
            return await out.json(200, anthropic.message_body(
                mid, request.model, reply.text, reply.thinking, reply.tool_calls, reply.stats,
                reply.finish_reason, reply.matched, request.show_thinking))
        await begin(reply.stats)
        for event in events.finish(reply.stats, reply.finish_reason, reply.matched):
            await out.named(*event)
        await out.end()


class CountTokens(Endpoint):
    """POST /v1/messages/count_tokens: the prompt a Messages request would read, counted by
    the engine with the model's template (the answer is stopped at its first piece)."""

    errors = (anthropic.error_body, anthropic.error_event)

    def parse(self, body: bytes) -> MessagesRequest:
        return parse_count_request(body)

    async def answer(self, request: MessagesRequest, out: Responder) -> None:
        options = replace(request.chat.options, max_tokens=1)
        async with self.host.turn() as turn:
            async with turn.answer(chat_run(request.chat.messages, options)) as answer:
                first = await anext(aiter(answer))  # leaving the block stops the answer
        if first.finish_reason == "error":
            raise chunk_error(first)
        refuse_dropped(first)
        await out.json(200, {"input_tokens": first.stats.prompt_length or first.stats.prompt_tokens})


class Responses(Endpoint):
    """POST /v1/responses: OpenAI's Responses API (protocols/responses/); kept in `store`."""

    def __init__(self, host: EngineHost, model_id: str, aliases: Sequence[str], max_body: int,
                 store: ResponseStore) -> None:
        super().__init__(host, model_id, aliases, max_body)
        self.store = store

    def parse(self, body: bytes) -> ResponsesRequest:
        data = parse_json(body)
        check_responses(data)
        previous = data.get("previous_response_id")
        earlier = self.store.items(previous) if previous else ()
        if earlier is None:
            raise ApiError(f"no stored response has the id {previous!r} (responses are kept in "
                           "this server's memory until it restarts, and only with 'store')",
                           status=404, code="previous_response_not_found",
                           param="previous_response_id")
        return responses_request(data, earlier)

    async def answer(self, request: ResponsesRequest, out: Responder) -> None:
        chat, data = request.chat, request.data
        rid, created = responses.new_id("resp"), int(time.time())

        def body(output: list, reply: Reply | None) -> dict[str, Any]:
            return responses.response(rid, created, chat.model or self.model_id, data, output,
                                      reply.stats if reply else None,
                                      reply.finish_reason if reply else None,
                                      request.ignored_tools, request.store,
                                      list(data.get("tools") or ()))

        events = responses.ResponseStream(body([], None), request.include_encrypted)

        async def begin() -> None:
            if not out.started:
                await out.start_events()
                for event in events.start():
                    await out.named(*event)

        async def on_delta(d: Delta, _first: bool) -> None:
            if chat.stream:
                await begin()
                for event in events.delta(d.reasoning, d.content, d.tool_calls):
                    await out.named(*event)

        async def on_progress(_chunk: Chunk) -> None:
            await begin()
            await out.comment("reading the prompt")

        async with self.host.turn() as turn:
            reply = await answer_one(turn, chat_run(chat.messages, chat.options), (), on_delta,
                                     on_progress if chat.stream else None)
        if chat.stream:
            await begin()
            whole = body([], reply)
            for event in events.finish(whole):
                await out.named(*event)
            output = events.output
        else:
            output = responses.output_items(reply.text, reply.thinking, reply.tool_calls,
                                            request.include_encrypted)
            whole = body(output, reply)
        if request.store:
            self.store.put(whole, (*request.items, *(responses.as_input(o) for o in output)))
        if chat.stream:
            await out.end()
        else:
            await out.json(200, whole)


async def _cancel_on_stop(host: EngineHost, scope: anyio.CancelScope) -> None:
    await host.wait_stopping()
    scope.cancel()


async def _cancel_on_disconnect(receive: Callable, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def create_app(host: EngineHost, *, model_id: str, aliases: Sequence[str] = (),
               api_key: str | None = None, loopback_only: bool = True,
               model_info: dict[str, Any] | None = None, max_body: int = MAX_BODY_BYTES,
               cors_origins: Sequence[str] = ()) -> Cors:
    """The server's ASGI application (run it with uvicorn); `cors_origins`: the web origins
    allowed besides this machine's own pages ('*': any), see cors.py."""
    created = int(time.time())
    card = {"id": model_id, "object": "model", "created": created, "owned_by": "pocketchat",
            **(model_info or {})}

    async def health(_: Request) -> JSONResponse:
        body = {**host.health(), "model": model_id}
        return JSONResponse(body, status_code=200 if host.state == "ready" else 503)

    spec = document()

    async def openapi(_: Request) -> JSONResponse:
        return JSONResponse(spec)

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [card]})

    async def model(request: Request) -> JSONResponse:
        name = request.path_params["name"]
        if name != model_id and name not in aliases:
            exc = ApiError(f"the model {name!r} does not exist: this server runs {model_id!r}",
                           status=404, code="model_not_found", param="model")
            return JSONResponse(error_body(exc), status_code=404)
        return JSONResponse(card)

    store = ResponseStore()

    def unknown_response(rid: str) -> JSONResponse:
        exc = ApiError(f"no stored response has the id {rid!r}", status=404,
                       code="response_not_found", param="id")
        return JSONResponse(error_body(exc), status_code=404)

    async def stored(request: Request) -> JSONResponse:
        rid = request.path_params["id"]
        found = store.body(rid)
        return JSONResponse(found) if found is not None else unknown_response(rid)

    async def forget(request: Request) -> JSONResponse:
        rid = request.path_params["id"]
        if not store.delete(rid):
            return unknown_response(rid)
        return JSONResponse({"id": rid, "object": "response", "deleted": True})

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        kind = "server_error" if status >= 500 else "invalid_request_error"
        text = getattr(exc, "detail", None) or "internal server error"
        if status in (404, 405):
            text = (f"{text}: {request.method} {request.url.path}. This server answers POST "
                    "/v1/chat/completions, POST /v1/completions, POST /v1/messages, POST "
                    "/v1/responses, GET /v1/models, GET /health and GET /openapi.json (the API's "
                    "schema); the /v1 prefix may be left out.")
        body = {"error": {"message": str(text), "type": kind, "param": None, "code": None}}
        return JSONResponse(body, status_code=status, headers=getattr(exc, "headers", None))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await host.start()
        try:
            yield
        finally:
            await host.stop()

    api: list[tuple[str, Any, list[str]]] = [  # served with and without the /v1 prefix
        ("/v1/models", models, ["GET"]),
        ("/v1/models/{name:path}", model, ["GET"]),
        ("/v1/chat/completions", ChatCompletions(host, model_id, aliases, max_body), ["POST"]),
        ("/v1/completions", Completions(host, model_id, aliases, max_body), ["POST"]),
        ("/v1/messages", Messages(host, model_id, aliases, max_body), ["POST"]),
        ("/v1/messages/count_tokens", CountTokens(host, model_id, aliases, max_body), ["POST"]),
        ("/v1/responses", Responses(host, model_id, aliases, max_body, store), ["POST"]),
        ("/v1/responses/{id}", stored, ["GET"]),
        ("/v1/responses/{id}", forget, ["DELETE"]),
    ]
    routes = [Route("/health", health, methods=["GET"]),
              Route("/openapi.json", openapi, methods=["GET"])]
    routes += [Route(path, endpoint, methods=methods) for path, endpoint, methods in api]
    routes += [Route(path.removeprefix("/v1"), endpoint, methods=methods)
               for path, endpoint, methods in api]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: http_error})
    guarded = Guard(Preflight(app), api_key=api_key, loopback_only=loopback_only)
    return Cors(guarded, CorsPolicy(cors_origins))


__all__ = ["create_app", "ChatCompletions", "Completions", "Messages", "CountTokens", "Responses",
           "MAX_BODY_BYTES", "send_error"]
