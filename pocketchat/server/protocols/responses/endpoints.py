"""The Responses API's endpoint over the shared `Endpoint`: POST /v1/responses (streaming or
not: the Responses event sequence, function calls, reasoning items), its answers kept in the
`ResponseStore` (store.py) for `previous_response_id` and GET/DELETE /v1/responses/{id}."""

from __future__ import annotations

import time
from typing import Any, Sequence

from pocketchat.engines.types import Chunk
from pocketchat.errors import ApiError
from pocketchat.server.endpoint import Endpoint, Responder, answer_one
from pocketchat.server.host import EngineHost
from pocketchat.server.turn import chat_run
from pocketchat.server.protocols.responses import encode as responses
from pocketchat.server.protocols.responses.requests import ResponsesRequest, responses_request
from pocketchat.server.protocols.responses.requests import check as check_responses
from pocketchat.server.protocols.responses.store import ResponseStore
from pocketchat.server.protocols.validate import parse_json
from pocketchat.server.reply import Delta, Reply


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
            options = self.thinking.options(chat.options, chat.thinking_from_server)
            reply = await answer_one(turn, chat_run(chat.messages, options), (), on_delta,
                                     on_progress if chat.stream else None,
                                     thinking=self.thinking, key=rid)
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


