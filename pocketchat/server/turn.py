"""A request's turn on the engine (`EngineHost.turn()`): the answers it asks, each streamed from
an engine thread into the event loop (`Streamed`).

A run (`Run`) is one answer asked of the loaded engine: `chat_run` (a conversation) or
`completion_run` (a raw prompt). `Turn.answer()` is an async context manager: whoever leaves
it early (a client that went away) cancels that answer in the engine at once (the answer's
own `cancel`: the others the engine runs go on), and it returns only when the engine has
really stopped it. A worker that stops answering ends the answers in flight with a 503
(`not_responding`).
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Sequence

import anyio

from pocketchat.engines.types import Answer, ChatOptions, Chunk, Engine, Liveness, Message
from pocketchat.errors import ApiError, EngineCrashed, EngineNotResponding
from pocketchat.server.access import note_answer

Run = Callable[[Engine], Answer]  # one answer, asked of the loaded engine


def chat_run(messages: Sequence[Message], options: ChatOptions) -> Run:
    """The engine's answer to a conversation."""
    return lambda engine: engine.chat(messages, options)


def completion_run(prompt: str | Sequence[int], options: ChatOptions) -> Run:
    """The engine's continuation of a raw prompt (text or token ids) as it is."""
    return lambda engine: engine.complete(prompt, options)


class Streamed:
    """One answer streaming from an engine thread into the event loop."""

    def __init__(self, engine: Engine, run: Run, executor: ThreadPoolExecutor) -> None:
        self._engine = engine
        self._answer: Answer | None = None
        self._loop = asyncio.get_running_loop()
        self._items: asyncio.Queue = asyncio.Queue()
        self.finished = False
        self.crashed = False
        self._stop = False
        self._end_thought = False
        self._done = self._loop.run_in_executor(executor, self._pump, run)

    def _pump(self, run: Run) -> None:
        put = self._loop.call_soon_threadsafe
        try:
            self._answer = run(self._engine)
            if self._end_thought:  # asked before the engine began
                self._answer.end_thinking()
            for chunk in self._answer:
                put(self._items.put_nowait, chunk)
                if self._stop and chunk.finish_reason is None:  # asked before the engine began
                    self._answer.cancel()
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which re-raises
            put(self._items.put_nowait, exc)
        put(self._items.put_nowait, None)

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        while (item := await self._items.get()) is not None:
            if isinstance(item, EngineNotResponding):  # asked of a worker that had just stopped
                item = not_responding(Liveness(False), item.message)
            if isinstance(item, BaseException):
                self.finished = True
                self.crashed = isinstance(item, EngineCrashed)
                raise item
            if item.finish_reason is not None:
                self.finished = True
                if item.finish_reason != "error":  # a refused answer read and wrote nothing
                    note_answer(item.stats)
            yield item

    def cancel(self) -> None:
        """Ask the engine to stop this answer alone (it ends with finish_reason 'cancelled');
        one not begun yet stops at its first chunk."""
        if not self.finished:
            self._stop = True
            if self._answer is not None:
                self._answer.cancel()

    def end_thinking(self) -> None:
        """Ask the engine to end this answer's thought now (the answer follows)."""
        if not self.finished:
            self._end_thought = True
            if self._answer is not None:
                self._answer.end_thinking()

    def fail(self, exc: BaseException) -> None:
        """End this answer for its reader now with `exc`, and ask the engine to stop it (a
        worker that does not respond lets it go at once)."""
        if not self.finished:
            self.cancel()
            self._items.put_nowait(exc)

    async def wait_stopped(self) -> None:
        await asyncio.shield(self._done)


class Turn:
    """A request's hold on the engine: its answers, one at a time."""

    def __init__(self, host: Any) -> None:  # a `host.EngineHost` (it imports this module)
        self._host = host
        self.answers = 0

    @asynccontextmanager
    async def answer(self, run: Run) -> AsyncIterator[Streamed]:
        """Stream one answer; leaving early cancels it, and returns once the engine stopped."""
        host = self._host
        if host.closing:
            raise stopping()
        engine = await host._ensure()
        answer = Streamed(engine, run, host._executor)
        host._answers.add(answer)
        host.running += 1
        self.answers += 1
        try:
            yield answer
        finally:
            answer.cancel()
            if not host.closing:  # stopping: the engine is closed next, nobody waits for it
                with anyio.CancelScope(shield=True):
                    await answer.wait_stopped()
            host._answers.discard(answer)
            host.running -= 1
            if answer.crashed:
                host._engine_crashed(engine)
            else:
                host.refresh_status()


    async def call(self, work: Callable[[Engine], Any]) -> Any:
        """`work(engine)` in the engine thread, between this turn's answers (restoring or
        saving a conversation's state: nothing else reaches the engine meanwhile)."""
        host = self._host
        engine = await host._ensure()
        return await asyncio.get_running_loop().run_in_executor(host._executor, work, engine)


def stopping() -> ApiError:
    return ApiError("the server is shutting down", status=503, type="server_error",
                    code="server_stopping", hint="Try again when it has been started again.")


def not_responding(found: Liveness, message: str = "", restart_in: float | None = None
                   ) -> ApiError:
    """503 for a request while the worker does not respond."""
    text = message or found.message or "the model process is not responding"
    after = f" in {restart_in:.0f} s" if restart_in is not None else ""
    return ApiError(f"{text}; the server restarts it{after} unless it resumes", status=503,
                    type="server_error", code="model_not_responding",
                    headers={"Retry-After": str(max(1, math.ceil(restart_in or 1)))},
                    hint="Try again after the time in the Retry-After header.")
