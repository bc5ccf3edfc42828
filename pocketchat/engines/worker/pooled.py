"""An engine whose model is split over RPC helpers (pocketchat/rpc/): a decorator of any `Engine`
that turns a crash a missing helper explains into `HelperGone` (which helper, what to do).

llama.cpp's RPC client aborts the process that loaded the model when a helper goes away, so the
engine it decorates runs in a worker process (`open_engine` opens a `WorkerEngine`); the abort
reaches this process as `EngineCrashed`, and the helpers are asked whether they still answer.
"""

from __future__ import annotations

from typing import Callable, Sequence

from pocketchat.engines.types import (Answer, ChatOptions, Chunk, Engine, EngineInfo, Liveness,
                                      Message, WatchedEngine, liveness_of)
from pocketchat.errors import EngineCrashed, HelperGone, HelperUnreachable
from pocketchat.rpc.wire import reachable


def explain_crash(endpoints: Sequence[str], exc: EngineCrashed) -> EngineCrashed:
    """`HelperGone` naming the helper that no longer answers, or `exc` when all do."""
    for ep in endpoints:
        why = reachable(ep)
        if why:
            return HelperGone(f"the helper at {ep} went away mid-answer ({why}); "
                              "the model could not go on", endpoint=ep, exitcode=exc.exitcode)
    if "RPC server" in exc.message:
        gone = endpoints[0] if len(endpoints) == 1 else "a helper"
        return HelperGone(f"the connection to {gone} broke mid-answer; the model could not go on",
                          endpoint=gone, exitcode=exc.exitcode)
    return exc


class PooledEngine:
    """`inner`, whose model is split over the helpers at `endpoints`, with their crashes explained."""

    def __init__(self, inner: Engine, endpoints: Sequence[str]) -> None:
        self.inner = inner
        self.endpoints = tuple(endpoints)
        self.gone: str | None = None  # the helper that went away (the chat reloads without it)

    @property
    def info(self) -> EngineInfo:
        return self.inner.info

    @property
    def pid(self) -> int | None:
        return getattr(self.inner, "pid", None)

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None) -> Answer:
        return ExplainedAnswer(self, self.inner.chat(messages, options))

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None) -> Answer:
        """The inner engine's raw continuation (see `base.EngineBase.complete`)."""
        return ExplainedAnswer(self, self.inner.complete(prompt, options))

    def explained(self, exc: EngineCrashed) -> EngineCrashed:
        """`exc`, or `HelperGone` when a helper explains it (remembered in `gone`)."""
        err = explain_crash(self.endpoints, exc)
        if isinstance(err, HelperGone):
            self.gone = err.endpoint
        return err

    def cancel(self) -> None:
        self.inner.cancel()

    def end_thinking(self) -> None:
        self.inner.end_thinking()

    def status(self) -> dict:
        """The inner engine's live figures."""
        return self.inner.status()

    def park(self) -> int:
        """The inner engine's (see `worker.WorkerEngine.park`); 0 when it has none."""
        fn = getattr(self.inner, "park", None)
        return fn() if callable(fn) else 0

    def liveness(self) -> Liveness:
        """The inner worker's (see `types.WatchedEngine`)."""
        return liveness_of(self.inner)

    def kill(self) -> None:
        """End the inner worker at once (see `types.WatchedEngine`)."""
        (self.inner.kill if isinstance(self.inner, WatchedEngine) else self.inner.close)()

    def close(self) -> None:
        self.inner.close()


class ExplainedAnswer:
    """An answer of the inner engine whose crash a missing helper explains (a `types.Answer`)."""

    def __init__(self, engine: PooledEngine, inner: Answer) -> None:
        self._engine, self._inner = engine, inner

    def __iter__(self) -> "ExplainedAnswer":
        return self

    def __next__(self) -> Chunk:
        try:
            return next(self._inner)
        except EngineCrashed as exc:
            raise self._engine.explained(exc) from exc

    def cancel(self) -> None:
        self._inner.cancel()

    def end_thinking(self) -> None:
        self._inner.end_thinking()

    def close(self) -> None:
        self._inner.close()


def open_pooled(endpoints: Sequence[str], open_inner: Callable[[], Engine]) -> PooledEngine:
    """`open_inner()` decorated; each helper is checked first and a crash while loading explained."""
    for ep in endpoints:  # fail here, clearly, rather than as an abort inside the worker
        why = reachable(ep, timeout=3.0)
        if why:
            raise HelperUnreachable(why, endpoint=ep)
    try:
        inner = open_inner()
    except EngineCrashed as exc:
        raise explain_crash(endpoints, exc) from exc
    return PooledEngine(inner, endpoints)
