"""The OpenAI-compatible HTTP API over one engine, as a Starlette (ASGI) application.

    POST /v1/chat/completions   streaming (SSE) or not; see protocols/openai/ for the fields
    POST /v1/completions        the legacy endpoint: a raw prompt continued
    POST /v1/messages           Anthropic's Messages API (and /v1/messages/count_tokens)
    POST /v1/responses          OpenAI's Responses API (GET/DELETE /v1/responses/{id}: stored)
    POST /v1/chat/completions/{id}/end_thinking   end a streaming answer's thought now (also
                                under /v1/messages/ and /v1/responses/; see thinking.py)
    GET  /v1/models             the one model this server runs
    POST /api/chat, /api/generate   Ollama's API (and GET /api/tags, /api/ps, /api/version,
                                POST /api/show, HEAD /: protocols/ollama/)
    GET  /health                {"status": "loading" | "ready" | "error", ...} (no key needed)
    GET  /                      the web chat (server/web/: its pages and the API they use)
    GET  /openapi.json          every endpoint's request and response (openapi.py)

The generating endpoints are plain ASGI callables (endpoint.py: they watch the connection
while they answer), one per protocol route (protocols/openai/endpoints.py); the rest are small
Starlette routes. Every path is served with and without its /v1 prefix. Guard (API key, Host)
and Cors wrap the whole application.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, AsyncIterator, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pocketchat.errors import ApiError
from pocketchat.server.access import AccessLog
from pocketchat.server.cors import Cors, CorsPolicy, Preflight
from pocketchat.server.endpoint import MAX_BODY_BYTES, Endpoint
from pocketchat.server.guard import Guard, error_for, send_error
from pocketchat.server.host import EngineHost
from pocketchat.server.openapi import document
from pocketchat.server.protocols.openai.encode import error_body
from pocketchat.server.protocols.anthropic.endpoints import CountTokens, Messages
from pocketchat.server.protocols.openai.endpoints import ChatCompletions, Completions
from pocketchat.server.protocols.responses.endpoints import Responses
from pocketchat.server.protocols.ollama import endpoints as ollama
from pocketchat.server.protocols.responses.store import ResponseStore
from pocketchat.server.thinking import ServerThinking, ThinkDefault
from pocketchat.server.web import OPEN_PAGES, Sessions, web_routes
from pocketchat.server.web.signin import cookie_of


def create_app(host: EngineHost, *, model_id: str, aliases: Sequence[str] = (),
               api_key: str | None = None, loopback_only: bool = True,
               model_info: dict[str, Any] | None = None, max_body: int = MAX_BODY_BYTES,
               cors_origins: Sequence[str] = (), thinking: ThinkDefault | None = None,
               access_log: Callable[[str], None] | None = None, tools: Any = None) -> Any:
    """The server's ASGI application (run it with uvicorn); `cors_origins`: the web origins
    allowed besides this machine's own pages ('*': any), see cors.py; `thinking`: what a
    request that says nothing of thinking gets (`serve --think`); `access_log`: where each
    request's line goes (access.py; None: nowhere); `tools`: the MCP servers
    (`tools.servers.ToolServers`) the web chat's model may call."""
    created = int(time.time())
    card = {"id": model_id, "object": "model", "created": created, "owned_by": "pocketchat",
            **(model_info or {})}

    async def health(_: Request) -> JSONResponse:
        body = {**host.health(), "model": model_id}
        return JSONResponse(body, status_code=200 if host.state in ("ready", "idle") else 503)

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
                    "/v1/responses, POST .../{id}/end_thinking, GET /v1/models, Ollama's POST "
                    "/api/chat and /api/generate, GET /health and GET /openapi.json (the API's "
                    "schema); the /v1 prefix may be left out. The web chat is at GET /.")
        body: dict[str, Any] = {"error": {"message": str(text), "type": kind, "param": None,
                                          "code": None}}
        if request.url.path.startswith("/api/"):  # Ollama's shape
            body = {"error": str(text)}
        return JSONResponse(body, status_code=status, headers=getattr(exc, "headers", None))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await host.start()
        try:
            yield
        finally:
            await host.stop()

    thoughts = ServerThinking(thinking)

    async def end_thinking(request: Request) -> JSONResponse:
        rid = request.path_params["id"]
        status = thoughts.end(rid)
        if status is None:
            exc = ApiError(f"no answer in flight has the id {rid!r} (it has ended, or it was "
                           "never streamed by this server)", status=404, code="answer_not_found",
                           param="id")
            return JSONResponse(error_for(exc, request.url.path), status_code=404)
        return JSONResponse({"id": rid, "object": "end_thinking", "status": status})

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
        *((f"{base}/{{id}}/end_thinking", end_thinking, ["POST"])
          for base in ("/v1/chat/completions", "/v1/messages", "/v1/responses")),
    ]
    native = [("/api/chat", ollama.OllamaChat(host, model_id, aliases, max_body), ["POST"]),
              ("/api/generate", ollama.OllamaGenerate(host, model_id, aliases, max_body), ["POST"]),
              *ollama.routes(host, model_id, (model_info or {}).get("meta", {}))]
    for _, endpoint, _ in (*api, *native):
        if isinstance(endpoint, Endpoint):
            endpoint.thinking = thoughts
    routes = [Route("/health", health, methods=["GET"]),
              Route("/openapi.json", openapi, methods=["GET"])]
    routes += [Route(path, endpoint, methods=methods) for path, endpoint, methods in api]
    routes += [Route(path.removeprefix("/v1"), endpoint, methods=methods)
               for path, endpoint, methods in api]
    routes += [Route(path, endpoint, methods=methods) for path, endpoint, methods in native]
    sessions = Sessions()
    routes += web_routes(host, model_id=model_id, model_info=model_info or {}, sessions=sessions,
                         api_key=api_key, thinking=thoughts, tools=tools)
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: http_error})
    guarded = Guard(Preflight(app), api_key=api_key, loopback_only=loopback_only,
                    open_paths=OPEN_PAGES | {"/web/api/signin"},
                    signed_in=lambda headers: sessions.valid(cookie_of(headers)))
    served = Cors(guarded, CorsPolicy(cors_origins))
    return served if access_log is None else AccessLog(served, access_log)


__all__ = ["create_app", "ChatCompletions", "Completions", "Messages", "CountTokens", "Responses",
           "MAX_BODY_BYTES", "send_error"]
