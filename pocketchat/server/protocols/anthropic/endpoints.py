"""Anthropic's two endpoints over the shared `Endpoint`: POST /v1/messages (streaming or not:
Anthropic's event sequence, tool calls, thinking) and POST /v1/messages/count_tokens, each
request validated by requests.py and each answer encoded by encode.py; errors in Anthropic's
shape."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pocketchat.engines.types import Chunk
from pocketchat.errors import ContextOverflow
from pocketchat.server.endpoint import Endpoint, Responder, answer_one, chunk_error
from pocketchat.server.turn import chat_run
from pocketchat.server.protocols.anthropic import encode as anthropic
from pocketchat.server.protocols.anthropic.requests import (MessagesRequest, parse_count_request,
                                                            parse_messages_request)
from pocketchat.server.reply import Delta


class Messages(Endpoint):
    """POST /v1/messages: Anthropic's Messages API (protocols/anthropic/)."""

    error_body = staticmethod(anthropic.error_body)
    error_event = staticmethod(anthropic.error_event)

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
            options = self.thinking.options(chat.options, chat.thinking_from_server)
            reply = await answer_one(turn, chat_run(chat.messages, options), chat.stop,
                                     on_delta, on_progress if chat.stream else None,
                                     thinking=self.thinking, key=mid)
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
    the engine with the model's template (the answer is stopped at its first piece). A prompt
    over the context is counted all the same (`context_window` says how much fits), so a
    client can learn how far over it is."""

    error_body = staticmethod(anthropic.error_body)
    error_event = staticmethod(anthropic.error_event)

    def parse(self, body: bytes) -> MessagesRequest:
        return parse_count_request(body)

    async def answer(self, request: MessagesRequest, out: Responder) -> None:
        options = replace(request.chat.options, max_tokens=1)
        async with self.host.turn() as turn:
            async with turn.answer(chat_run(request.chat.messages, options)) as answer:
                first = await anext(aiter(answer))  # leaving the block stops the answer
        limit = first.stats.context_limit
        if first.finish_reason == "error":
            if not isinstance(first.failure, ContextOverflow):
                raise chunk_error(first)
            count = first.failure.whole  # over the context: counted all the same
        else:
            count = (first.stats.conversation_tokens or first.stats.prompt_length
                     or first.stats.prompt_tokens)
        body: dict = {"input_tokens": count}
        if first.stats.dropped_messages or first.finish_reason == "error":
            # more than a Messages request may read: say how much room there is (an extension)
            body["context_window"] = limit
        await out.json(200, body)

