"""Ollama's native API over the shared `Endpoint`: POST /api/chat and /api/generate (one JSON
object, or with `stream` (the default) newline-delimited JSON pieces ending with the figures),
and the small routes its clients call first: GET /api/tags, POST /api/show, GET /api/ps,
GET /api/version, HEAD and GET /. What pocketchat does otherwise (pulling, deleting, copying,
creating models, embeddings) is one Ollama-shaped error saying what to do instead."""

from __future__ import annotations

import time
from typing import Any, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pocketchat.errors import ApiError
from pocketchat.server.endpoint import Endpoint, Responder, answer_one
from pocketchat.server.host import EngineHost
from pocketchat.server.protocols.ollama import encode as ollama
from pocketchat.server.protocols.ollama.requests import (SHOW, OllamaRequest, parse_chat,
                                                         parse_generate)
from pocketchat.server.protocols.validate import parse_json
from pocketchat.server.reply import Delta
from pocketchat.server.turn import chat_run, completion_run

REFUSED = {
    "/api/pull": "pocketchat downloads builds itself: run `pocketchat download BUILD`, then "
                 "restart `pocketchat serve --model BUILD`",
    "/api/push": "pocketchat does not publish models",
    "/api/delete": "remove a build with `pocketchat models rm BUILD`",
    "/api/copy": "this server answers any model name with the model it runs: no copy is needed",
    "/api/create": "pocketchat runs GGUF and MLX files as they are: pass one with "
                   "`pocketchat serve --model PATH`",
    "/api/embed": "pocketchat does not compute embeddings",
    "/api/embeddings": "pocketchat does not compute embeddings",
    "/api/blobs/{digest}": "pocketchat does not take model files over HTTP: pass a file with "
                           "`pocketchat serve --model PATH`",
}


class _Generating(Endpoint):
    """/api/chat and /api/generate: the same answer path, two shapes."""

    error_body = staticmethod(ollama.error_body)
    chat_shape = True

    async def answer(self, request: OllamaRequest, out: Responder) -> None:
        if request.keep_alive is not None:  # this request says how long the model stays
            self.host.idle_unload = None if request.keep_alive < 0 else request.keep_alive
        started = time.perf_counter()
        chat, model = request.chat, request.model or self.model_id
        if not self.chat_shape and request.raw is None and not chat.messages[-1].content:
            # an empty prompt loads the model (Ollama's preload call): it is loaded already
            return await out.json(200, {"model": model, "created_at": ollama.now(), "response": "",
                                        "done": True, "done_reason": "load"})

        async def on_delta(d: Delta, _first: bool) -> None:
            if not chat.stream or not (d.content or d.reasoning or d.tool_calls):
                return
            if not out.started:
                await out.start_lines()
            await out.line(ollama.piece(model, self.chat_shape, d.content, d.reasoning,
                                        d.tool_calls))

        async with self.host.turn() as turn:
            options = self.thinking.options(chat.options, chat.thinking_from_server)
            run = (completion_run(request.raw, options) if request.raw is not None
                   else chat_run(chat.messages, options))
            reply = await answer_one(turn, run, chat.stop, on_delta)
        if chat.stream:
            last = ollama.piece(model, self.chat_shape, "")
        else:
            last = ollama.piece(model, self.chat_shape, reply.text, reply.thinking,
                                reply.tool_calls)
        last.update(ollama.figures(reply.stats, reply.finish_reason, started))
        if self.chat_shape and chat.stream and reply.tool_calls and not out.started:
            last["message"]["tool_calls"] = ollama.tool_calls(reply.tool_calls)
        if not chat.stream:
            return await out.json(200, last)
        if not out.started:
            await out.start_lines()
        await out.line(last)
        await out.end()


class OllamaChat(_Generating):
    """POST /api/chat."""

    def parse(self, body: bytes) -> OllamaRequest:
        return parse_chat(body)


class OllamaGenerate(_Generating):
    """POST /api/generate."""

    chat_shape = False

    def parse(self, body: bytes) -> OllamaRequest:
        return parse_generate(body)


def routes(host: EngineHost, model_id: str, meta: dict[str, Any]
           ) -> list[tuple[str, Callable, list[str]]]:
    """The small routes (see the module docstring) as (path, handler, methods)."""
    modified = ollama.now()

    def capabilities() -> list[str]:
        caps = ["completion", "tools"]
        engine = host.engine
        if engine is None or engine.info.thinking is not False:
            caps.append("thinking")
        return caps

    async def tags(_: Request) -> JSONResponse:
        return JSONResponse({"models": [ollama.model_entry(model_id, meta, modified)]})

    async def show(request: Request) -> JSONResponse:
        try:
            SHOW.check(parse_json(await request.body()))
        except ApiError as exc:
            return JSONResponse(ollama.error_body(exc), status_code=exc.status)
        return JSONResponse({
            "modelfile": "", "parameters": "", "template": "", "license": "",
            "details": ollama.details(meta), "capabilities": capabilities(),
            "model_info": {"general.architecture": meta.get("family", ""),
                           "general.name": model_id,
                           f"{meta.get('family') or 'model'}.context_length": meta.get("n_ctx", 0)},
            "modified_at": modified})

    async def ps(_: Request) -> JSONResponse:
        loaded = host.state == "ready"
        entry = {**ollama.model_entry(model_id, meta, modified),
                 "expires_at": "2318-01-01T00:00:00Z", "size_vram": meta.get("size_vram", 0),
                 "context_length": meta.get("n_ctx", 0)}
        return JSONResponse({"models": [entry] if loaded else []})

    async def version(_: Request) -> JSONResponse:
        return JSONResponse({"version": ollama.OLLAMA_VERSION})

    async def root(_: Request) -> Response:  # GET / is the web chat (server/web/)
        return Response(status_code=200)

    def refused(path: str, why: str) -> Callable:
        async def handler(_: Request) -> JSONResponse:
            exc = ApiError(f"{path} is not offered by pocketchat: {why}", status=501,
                           code="not_implemented")
            return JSONResponse(ollama.error_body(exc), status_code=501)
        return handler

    out: list[tuple[str, Callable, list[str]]] = [
        ("/api/tags", tags, ["GET"]), ("/api/show", show, ["POST"]), ("/api/ps", ps, ["GET"]),
        ("/api/version", version, ["GET"]), ("/", root, ["HEAD"]),
    ]
    out += [(path, refused(path.replace("/{digest}", ""), why), ["POST", "DELETE", "HEAD", "GET"])
            for path, why in REFUSED.items()]
    return out
