"""Engines: (LoadPlan, path) -> a loaded model that answers conversations (llama.cpp or MLX),
by default in a worker process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pocketchat.engines.types import Engine
    from pocketchat.types import LoadPlan


def open_engine(plan: "LoadPlan", path: Path, *, name: str | None = None,
                in_process: bool = False, chunk_interval: float | None = None,
                on_progress: Callable[[str, float], None] | None = None) -> "Engine":
    """Load the model at `path` as `plan` says and return it, ready to chat.

    By default the backend runs in a child process (`worker.WorkerEngine`); this blocks until
    the model is loaded. For a loading screen, construct `WorkerEngine(..., wait=False)` and
    call its `wait_ready(timeout)`. `in_process=True` runs the backend in this process (tests,
    tools that have no other busy thread), over its sequences as the worker serves it
    (`sequences.Sequences`, one for a plan without `parallel`). A plan pooled over RPC helpers (`plan.rpc_servers`)
    gets the worker decorated by `pooled.PooledEngine`, whose crashes name the helper that went
    away. `chunk_interval`: the shortest time between two chunks of an answer from the worker
    (the first comes at once; default `child.FLUSH_SECONDS`): a reader that shows text less
    often needs no more. `on_progress(stage, fraction)` sees the load ("loading": the fraction
    llama.cpp reports as it reads the file).
    """
    kwargs: dict = {} if chunk_interval is None else {"chunk_interval": chunk_interval}
    if in_process:
        from pocketchat.engines.worker.child import make_backend
        from pocketchat.engines.batch.sequences import Sequences

        engine = make_backend(plan, Path(path), name, on_progress)
        return engine if isinstance(engine, Sequences) else Sequences([engine])
    if on_progress is not None:
        kwargs["on_progress"] = on_progress
    from pocketchat.engines.worker.parent import WorkerEngine

    if plan.rpc_servers:
        from pocketchat.engines.worker.pooled import open_pooled

        return open_pooled(plan.rpc_servers, lambda: WorkerEngine(plan, Path(path), name=name, **kwargs))
    return WorkerEngine(plan, Path(path), name=name, **kwargs)
