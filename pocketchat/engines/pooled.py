"""A worker engine whose model is split over RPC helpers (pocketchat/rpc/): a crash that a
missing helper explains becomes `HelperGone` (which helper, and what to do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

from pocketchat.errors import EngineCrashed, HelperGone, HelperUnreachable
from pocketchat.rpc.wire import reachable


class PooledEngine:
    """A worker engine whose model is split over helpers; a crash a helper explains is `HelperGone`."""

    def __init__(self, inner: Any, endpoints: Sequence[str]) -> None:
        self.inner = inner
        self.endpoints = tuple(endpoints)
        self.gone: str | None = None

    @property
    def info(self) -> Any:
        return self.inner.info

    @property
    def pid(self) -> int | None:
        return getattr(self.inner, "pid", None)

    def chat(self, messages: Sequence[Any], options: Any = None) -> Iterator[Any]:
        return self._chat(self.inner.chat(messages, options))

    def _chat(self, chunks: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from chunks
        except EngineCrashed as exc:
            raise self.explain(exc) from exc

    def explain(self, exc: EngineCrashed) -> EngineCrashed:
        """`HelperGone` naming the helper that no longer answers, or `exc` when all do."""
        for ep in self.endpoints:
            why = reachable(ep)
            if why:
                self.gone = ep
                return HelperGone(f"the helper at {ep} went away mid-answer ({why}); "
                                  "the model could not go on", endpoint=ep, exitcode=exc.exitcode)
        if "RPC server" in exc.message:
            self.gone = self.endpoints[0] if len(self.endpoints) == 1 else "a helper"
            return HelperGone(f"the connection to {self.gone} broke mid-answer; the model could not "
                              "go on", endpoint=self.gone, exitcode=exc.exitcode)
        return exc

    def cancel(self) -> None:
        self.inner.cancel()

    def close(self) -> None:
        self.inner.close()


def open_pooled(plan: Any, path: Path, *, name: str | None = None, **kwargs: Any) -> PooledEngine:
    """The worker engine for a pooled plan, with helper failures at load time explained too."""
    from pocketchat.engines.worker import WorkerEngine

    endpoints = plan.rpc_servers
    for ep in endpoints:  # fail here, clearly, rather than as an abort inside the worker
        why = reachable(ep, timeout=3.0)
        if why:
            raise HelperUnreachable(why, endpoint=ep)
    engine = PooledEngine(None, endpoints)
    try:
        engine.inner = WorkerEngine(plan, Path(path), name=name, **kwargs)
    except EngineCrashed as exc:
        raise engine.explain(exc) from exc
    return engine
