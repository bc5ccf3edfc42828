"""The Python API: the model this machine should run, loaded and answering, from a Python app.

    import pocketchat

    with pocketchat.load() as session:   # the build `pocketchat --recommend` picks ("starter":
        reply = session.chat([{"role": "user", "content": "Hello!"}])  # the small one installed)
        print(reply.text)

It takes the CLI's path: `choose` (the same choice, download step and load plan as the chat
and `pocketchat serve`: the recommendation, or `model=`), then `open_session` (the engine in
its worker process). `pocketchat serve` and one-shot mode are built on these two.
`Session.chat` takes OpenAI-style messages (dicts, validated as the server validates them)
or `Message`s, and the request fields the server passes on: `tools`, `tool_choice`,
`response_format`, logprobs, sampling. It streams typed `Chunk`s (`stream=True`) or returns a
`ChatResult`. `Session.complete` continues a raw prompt (no template: the legacy completions
endpoint's path). A failed answer raises its `PocketchatError` and leaves the session ready for
the next; one answer at a time per session. A model not on disk is downloaded as `download=`
says (`download_hooks`). The worker is a process of its own (`engines.process.launch`): no
`if __name__ == "__main__":` guard is needed in a script.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, Sequence, overload

from pocketchat.documents import Attachment, attach, read_path
from pocketchat.engines.types import (Answer, ChatOptions, Chunk, Engine, EngineInfo, FinishReason,
                                      Message, Stats, TokenLogprob, ToolCall)
from pocketchat.errors import ApiError, EngineClosed, EngineError, PocketchatError, SessionBusy

if TYPE_CHECKING:
    from pocketchat.choose.model import ModelChoice
    from pocketchat.choose.selection import Selection
    from pocketchat.store.types import DownloadPlan, DownloadProgress
    from pocketchat.types import Backend, LoadPlan

MessageLike = Mapping[str, Any] | Message

__all__ = ["ChatResult", "Session", "choose", "download_hooks", "load", "open_session"]


@dataclass(frozen=True)
class ChatResult:
    """A whole answer: its text, thinking, tool calls, why it stopped, and its figures."""

    text: str
    thinking: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    stats: Stats
    logprobs: tuple[TokenLogprob, ...] = ()

    def json(self) -> Any:
        """The text parsed as JSON (an answer asked for with `response_format`)."""
        return json.loads(self.text)


def choose(selection: "Selection", *, confirm: Callable[["DownloadPlan"], bool] | None = None,
           progress: Callable[["DownloadProgress"], None] | None = None) -> "ModelChoice":
    """The model a selection names (or the recommended build), on disk, with its load plan.

    Downloads what is missing (asking `confirm` first when given); OfflineError when it is
    not on disk and the Hub cannot be reached or `selection.offline` is set.
    """
    from pocketchat.choose.model import choose_model

    return choose_model(selection, confirm=confirm, progress=progress)


def open_session(choice: "ModelChoice", *, in_process: bool = False,
                 chunk_interval: float | None = None,
                 on_progress: Callable[[str, float], None] | None = None) -> "Session":
    """Load the chosen model (in a worker process unless `in_process`); blocks until ready;
    `on_progress(stage, fraction)` sees the load (llama.cpp's fraction of the file loaded)."""
    from pocketchat.engines import open_engine

    engine = open_engine(choice.plan, choice.path, name=choice.label, in_process=in_process,
                         chunk_interval=chunk_interval, on_progress=on_progress)
    return Session(engine, choice)


def load(model: str | None = None, *, ctx: int | None = None, backend: "Backend | None" = None,
         offline: bool = False, threads: int | None = None, lang: str = "en",
         download: bool | Callable[["DownloadPlan"], bool] = True,
         progress: Callable[["DownloadProgress"], None] | None = None,
         in_process: bool = False) -> "Session":
    """The model this machine should run (the plan `pocketchat --recommend` shows), loaded.

    `model`: a build id, REPO:QUANT, REPO/FILE, a local .gguf or MLX folder, or "starter" (the
    small model that ships with pocketchat); None: the recommendation. `ctx`, `backend`,
    `threads`, `lang` fix what the plan would otherwise choose.

    A model not on disk is downloaded once (the Hugging Face cache; resumed, checked), as
    `download` says: True (the default) says what and how big on stderr first, then fetches;
    False refuses (DownloadDeclined, with the size; nothing is fetched); a function
    `download(plan) -> bool` decides (`plan.total_bytes`, `plan.question()`; nothing is
    written to stderr then). The progress is a bar on stderr when stderr is a terminal, or
    goes to `progress(p)` (a `DownloadProgress`) when given. `offline`: never the network.
    """
    from pocketchat.choose.selection import Selection

    selection = Selection(model=model, ctx=ctx, backend=backend, offline=offline,
                          threads=threads, lang=lang, yes=True).checked()
    confirm, report, finish = download_hooks(download, progress)
    try:
        choice = choose(selection, confirm=confirm, progress=report)
    finally:
        finish()
    return open_session(choice, in_process=in_process)


def download_hooks(download: bool | Callable[["DownloadPlan"], bool],
                   progress: Callable[["DownloadProgress"], None] | None,
                   stream: Any = None
                   ) -> tuple[Callable[["DownloadPlan"], bool],
                              Callable[["DownloadProgress"], None] | None, Callable[[], None]]:
    """`load`'s `download` and `progress` as the store takes them: (confirm, progress, finish:
    ends the bar's line). `stream`: where the size and the bar go (default sys.stderr)."""
    import sys

    from pocketchat.errors import DownloadDeclined
    from pocketchat.store.progress import TerminalProgress
    from pocketchat.store.types import human_bytes
    from pocketchat.textsafe import visible

    out = stream if stream is not None else sys.stderr
    bar = None
    if progress is None and out is not None and getattr(out, "isatty", lambda: False)():
        bar = TerminalProgress(out)

    def confirm(plan: "DownloadPlan") -> bool:
        size = human_bytes(plan.total_bytes)
        if plan.resumed_bytes > 0:
            size += f", {human_bytes(plan.transfer_bytes)} left to fetch"
        if download is True:
            if out is not None:
                TerminalProgress.end_line()  # the checks' line, left open on a terminal
                out.write(visible(f"pocketchat: downloading {plan.name} ({size}) to "
                                  f"{plan.destination}; free disk after: "
                                  f"{human_bytes(plan.free_after_bytes)}") + "\n")
                out.flush()
            return True
        if download is False:
            why = "load() was called with download=False"
        elif callable(download) and download(plan):
            return True
        else:
            why = "the download function said no"
        raise DownloadDeclined(f"not downloading {visible(plan.name)} ({size}): {why}; nothing "
                               "was downloaded",
                               hint="Pass download=True to load() to fetch it, or load a model "
                                    "that is on disk (`pocketchat models` lists them).")

    def finish() -> None:
        if bar is not None:
            bar.finish()

    return confirm, (progress if progress is not None else bar), finish


class Session:
    """A loaded model answering conversations; close it (or use `with`) to free its memory."""

    def __init__(self, engine: Engine, choice: "ModelChoice | None" = None) -> None:
        self.engine = engine
        self.choice = choice
        self._busy = threading.Lock()  # one answer at a time; callers wait their turn
        self._holder: int | None = None  # the thread whose answer holds it
        self._closed = False

    @property
    def info(self) -> EngineInfo:
        """What is running: backend, model, placement, context size, notes."""
        return self.engine.info

    @property
    def name(self) -> str:
        """The model's name as the chat shows it."""
        return self.choice.label if self.choice is not None else self.engine.info.model

    @property
    def plan(self) -> "LoadPlan | None":
        return self.choice.plan if self.choice is not None else None

    @property
    def path(self) -> Path | None:
        return self.choice.path if self.choice is not None else None

    @overload
    def chat(self, messages: Sequence[MessageLike], *, stream: Literal[False] = False,
             tools: Sequence[Mapping[str, Any]] | None = None,
             tool_choice: str | Mapping[str, Any] | None = None,
             parallel_tool_calls: bool | None = None,
             response_format: Mapping[str, Any] | None = None, thinking: bool | int | None = None,
             max_tokens: int | None = None, temperature: float | None = None,
             top_p: float | None = None, seed: int | None = None, logprobs: int | None = None,
             options: ChatOptions | None = None, timeout: float | None = None,
             files: Sequence[str | Path | Attachment] = ()) -> ChatResult: ...

    @overload
    def chat(self, messages: Sequence[MessageLike], *, stream: Literal[True],
             tools: Sequence[Mapping[str, Any]] | None = None,
             tool_choice: str | Mapping[str, Any] | None = None,
             parallel_tool_calls: bool | None = None,
             response_format: Mapping[str, Any] | None = None, thinking: bool | int | None = None,
             max_tokens: int | None = None, temperature: float | None = None,
             top_p: float | None = None, seed: int | None = None, logprobs: int | None = None,
             options: ChatOptions | None = None, timeout: float | None = None,
             files: Sequence[str | Path | Attachment] = ()) -> Iterator[Chunk]: ...

    def chat(self, messages: Sequence[MessageLike], *, stream: bool = False,
             tools: Sequence[Mapping[str, Any]] | None = None,
             tool_choice: str | Mapping[str, Any] | None = None,
             parallel_tool_calls: bool | None = None,
             response_format: Mapping[str, Any] | None = None, thinking: bool | int | None = None,
             max_tokens: int | None = None, temperature: float | None = None,
             top_p: float | None = None, seed: int | None = None, logprobs: int | None = None,
             options: ChatOptions | None = None, timeout: float | None = None,
             files: Sequence[str | Path | Attachment] = ()) -> ChatResult | Iterator[Chunk]:
        """Answer the conversation: a `ChatResult`, or the typed chunks as they come (`stream`).

        `messages`: OpenAI-style dicts (assistant `tool_calls` and `reasoning_content`, `tool`
        results; a trailing assistant message is continued) or `Message`s. `tools`,
        `tool_choice`, `response_format` as in OpenAI's API; `thinking`: False (answer at once),
        True (think; no budget of its own), or N (think at most N tokens, then answer; 0 is
        off); `logprobs=N` gives each token's
        logprob and N alternatives. `options` sets anything else (min_p, penalties, ...); the
        keywords given override it. Invalid input raises ApiError (a ValueError) naming it.
        `files`: paths (or `documents.Attachment`s) for the last user message, read as the chat
        reads them (DocumentRefused, a ValueError, for one it cannot take); files larger than
        the context are answered from retrieved passages (`stats.retrieval`, `.sources`).

        A session answers one call at a time: a call from another thread while it answers
        waits its turn (at most `timeout` seconds, then SessionBusy; None waits as long as it
        takes). A thread that starts a second answer while its own first is unread gets
        SessionBusy at once (it would wait for itself).
        """
        conversation, opts = self.chat_request(
            messages, options, tools=tools, tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls, response_format=response_format,
            thinking=thinking, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
            seed=seed, logprobs=logprobs)
        if files:
            conversation = attach(conversation, [f if isinstance(f, Attachment) else read_path(f)
                                                 for f in files])
            if conversation is None:
                raise ApiError("files are attached to a user message, and the conversation "
                               "has none", param="files", code="invalid_value")
        chunks = self._answer(conversation, opts, timeout)
        return chunks if stream else _gather(chunks)

    @overload
    def complete(self, prompt: str, *, stream: Literal[False] = False,
                 max_tokens: int | None = None, temperature: float | None = None,
                 top_p: float | None = None, seed: int | None = None, logprobs: int | None = None,
                 options: ChatOptions | None = None, timeout: float | None = None) -> ChatResult: ...

    @overload
    def complete(self, prompt: str, *, stream: Literal[True],
                 max_tokens: int | None = None, temperature: float | None = None,
                 top_p: float | None = None, seed: int | None = None, logprobs: int | None = None,
                 options: ChatOptions | None = None, timeout: float | None = None
             ) -> Iterator[Chunk]: ...

    def complete(self, prompt: str, *, stream: bool = False, max_tokens: int | None = None,
                 temperature: float | None = None, top_p: float | None = None,
                 seed: int | None = None, logprobs: int | None = None,
                 options: ChatOptions | None = None, timeout: float | None = None
                 ) -> ChatResult | Iterator[Chunk]:
        """Continue `prompt` as raw text (no chat template, no reasoning, no tools): a
        `ChatResult`, or the typed chunks as they come (`stream`). Keywords (and the turn a
        call waits for, `timeout`) as in `chat`."""
        prompt, opts = self.complete_request(prompt, options, max_tokens=max_tokens,
                                             temperature=temperature, top_p=top_p, seed=seed,
                                             logprobs=logprobs)
        if self._closed:
            raise EngineClosed("this session is closed", hint="Load the model again with pocketchat.load().")
        chunks = self._stream((), opts, timeout, start=lambda: self.engine.complete(prompt, opts))
        return chunks if stream else _gather(chunks)

    @staticmethod
    def chat_request(messages: Any, options: ChatOptions | None = None,
                     **given: Any) -> tuple[tuple[Message, ...], ChatOptions]:
        """`chat`'s arguments validated as the server validates a request (one rule, the
        published schema): the conversation and its options, or ApiError naming the argument."""
        from pocketchat.server.protocols.openai.requests import (chat_request, options_fields,
                                                                 plain)

        data = options_fields(ChatOptions() if options is None else options)
        for key in ("tools", "tool_choice", "parallel_tool_calls", "response_format",
                    "max_tokens", "temperature", "top_p", "seed"):
            if given.get(key) is not None:
                data[key] = given[key]
        if given.get("logprobs") is not None:
            data["logprobs"], data["top_logprobs"] = True, given["logprobs"]
        thinking = given.get("thinking")
        if isinstance(thinking, int) and not isinstance(thinking, bool):  # a budget in tokens
            data["thinking_budget_tokens"] = thinking
            thinking = thinking != 0
        if thinking is not None:
            data["chat_template_kwargs"] = {**(data.get("chat_template_kwargs") or {}),
                                            "enable_thinking": thinking}
            if thinking is False:
                data.pop("thinking_budget_tokens", None)
        data["messages"] = list(messages) if isinstance(messages, tuple) else messages
        with _named_as_arguments():
            request = chat_request(plain(data))
        return request.messages, request.options

    @staticmethod
    def complete_request(prompt: Any, options: ChatOptions | None = None,
                         **given: Any) -> tuple[str | tuple[int, ...], ChatOptions]:
        """`complete`'s arguments validated as the server's legacy completions request (the
        prompt: text or token ids, one of them); ApiError names the argument."""
        from pocketchat.server.protocols.openai.requests import (completion_request,
                                                                 options_fields, plain)

        data = options_fields(ChatOptions() if options is None else options, chat=False)
        data.update({k: v for k, v in given.items() if v is not None})
        data["prompt"] = list(prompt) if isinstance(prompt, tuple) else prompt
        with _named_as_arguments():
            request = completion_request(plain(data))
        if len(request.prompts) != 1:
            raise ApiError("complete() continues one prompt: text or a list of token ids",
                           param="prompt", code="invalid_value")
        opts = request.options
        if data.get("max_tokens") is None:  # not the endpoint's default of 16: the plan's
            opts = replace(opts, max_tokens=None)
        return request.prompts[0], opts

    def _answer(self, messages: tuple[Message, ...], options: ChatOptions,
                timeout: float | None = None) -> Iterator[Chunk]:
        if self._closed:
            raise EngineClosed("this session is closed", hint="Load the model again with pocketchat.load().")
        return self._stream(messages, options, timeout)

    def _take_turn(self, timeout: float | None) -> None:
        """Wait for the one-answer guard (see `chat`); SessionBusy when it is not had."""
        me = threading.get_ident()
        if self._holder == me:
            raise SessionBusy("this thread's previous answer is still being read (one answer "
                              "at a time)",
                              hint="Read that answer to its end, or close its iterator, first.")
        if not self._busy.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise SessionBusy(f"this session was still answering another call after {timeout:g} s",
                              hint="Wait longer (a larger timeout=), or load another session.")
        self._holder = me
        if self._closed:
            self._let_go()
            raise EngineClosed("this session is closed", hint="Load the model again with pocketchat.load().")

    def _let_go(self) -> None:
        self._holder = None
        self._busy.release()

    def _stream(self, messages: tuple[Message, ...], options: ChatOptions,
                timeout: float | None = None, start: Callable[[], Answer] | None = None
                ) -> Iterator[Chunk]:
        """The engine's chunks under the session's one-answer guard (taken when the first
        chunk is asked for): a failed chunk raises its error; the guard is let go before the
        final chunk is handed over, and on every error or early stop (the engine's answer is
        cancelled and closed then)."""
        self._take_turn(timeout)
        held, finished = True, False
        inner: Answer | None = None
        try:
            inner = start() if start is not None else self.engine.chat(messages, options)
            for chunk in inner:
                if chunk.finish_reason == "error":
                    finished = True
                    raise chunk.failure or EngineError(f"the answer failed: {chunk.error or 'unknown error'}")
                if chunk.finish_reason is not None:
                    finished = True
                    held = False
                    self._let_go()
                yield chunk
        finally:
            try:
                if not finished and inner is not None:
                    self.engine.cancel()  # the caller stopped reading: stop the engine's answer too
            finally:
                try:
                    if inner is not None:
                        inner.close()
                finally:
                    if held:
                        self._let_go()

    def cancel(self) -> None:
        """Stop the answer in flight (safe from another thread); it ends with 'cancelled'."""
        self.engine.cancel()

    def end_thinking(self) -> None:
        """End the thought of the answer in flight now (safe from another thread): the model
        closes it and answers (`chunk.stats.thinking_end` "user"); nothing outside a thought."""
        self.engine.end_thinking()

    def close(self) -> None:
        """Free the model's memory; the session cannot answer after."""
        if not self._closed:
            self._closed = True
            self.engine.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The request fields the Python API takes under another name (logprobs=N, thinking=).
ARGUMENT_NAMES = {"top_logprobs": "logprobs", "chat_template_kwargs.enable_thinking": "thinking",
                  "thinking_budget_tokens": "thinking"}


@contextmanager
def _named_as_arguments() -> Iterator[None]:
    """An ApiError about a request field the Python API takes under another name names the
    argument instead."""
    try:
        yield
    except ApiError as exc:
        name = ARGUMENT_NAMES.get(exc.param or "")
        if name is None:
            raise
        raise ApiError(exc.message.replace(f"'{exc.param}'", f"'{name}'"), param=name,
                       code=exc.code, hint=exc.hint) from None


def _gather(chunks: Iterator[Chunk]) -> ChatResult:
    text: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    lps: list[TokenLogprob] = []
    last = Chunk()
    for last in chunks:
        text.append(last.text)
        thinking.append(last.thinking)
        calls.extend(last.tool_calls)
        lps.extend(last.logprobs)
    if last.finish_reason is None:
        raise PocketchatError("the answer ended without a finish reason")
    return ChatResult(text="".join(text), thinking="".join(thinking), tool_calls=tuple(calls),
                      finish_reason=last.finish_reason, stats=last.stats, logprobs=tuple(lps))

