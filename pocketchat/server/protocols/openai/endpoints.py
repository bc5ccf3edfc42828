"""OpenAI's two generating endpoints over the shared `Endpoint`: POST /v1/chat/completions
(streaming or not, n choices, tool calls, logprobs, prompt progress) and the legacy POST
/v1/completions (raw prompts continued), each request validated by requests.py and each answer
encoded by encode.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pocketchat.engines.types import Chunk
from pocketchat.server.endpoint import Endpoint, Responder, answer_one, quiet
from pocketchat.server.turn import Run, Turn, chat_run, completion_run
from pocketchat.server.protocols.files import retrieval_field
from pocketchat.server.protocols.openai.encode import (legacy_logprobs, logprob_entries,
                                                       prompt_progress, timings, tool_call_entries,
                                                       usage)
from pocketchat.server.protocols.openai.requests import (parse_chat_request,
                                                         parse_completion_request)
from pocketchat.server.reply import Delta, Reply
from pocketchat.server.request import ChatRequest, CompletionRequest, Prompt, combined, seeded


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
                options = self.thinking.options(request.options, request.thinking_from_server)
                run = chat_run(request.messages, seeded(options, index))
                if request.stream:
                    replies.append(await self._stream_choice(request, base, index, turn, run, out))
                else:
                    replies.append(await answer_one(turn, run, request.stop, quiet))
        stats = combined([r.stats for r in replies])
        if not request.stream:
            return await out.json(200, {
                **meta, "object": "chat.completion", "system_fingerprint": None,
                "choices": [self._choice(i, r, request) for i, r in enumerate(replies)],
                "usage": usage(stats), "timings": timings(stats), **retrieval_field(stats),
            })
        if request.include_usage:
            await out.event({**base, "choices": [], "usage": usage(stats),
                             **retrieval_field(stats)})
        await self.end_stream(out)

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
                                 on_progress if request.return_progress else None,
                                 thinking=self.thinking, key=base["id"])
        await out.event(event({}, reply.finish_reason, timings=timings(reply.stats),
                              **retrieval_field(reply.stats)))
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
        await self.end_stream(out)

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
