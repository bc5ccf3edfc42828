"""Model store, engines (llama.cpp, MLX) and the worker process that hosts them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pocketchat.runtime.engine import Engine
    from pocketchat.types import LoadPlan


def open_engine(plan: "LoadPlan", path: Path, *, name: str | None = None,
                in_process: bool = False) -> "Engine":
    """Load the model at `path` as `plan` says and return it, ready to chat.

    By default the backend runs in a child process (`worker.WorkerEngine`); this blocks until
    the model is loaded. For a loading screen, construct `WorkerEngine(..., wait=False)` and
    call its `wait_ready(timeout)`. `in_process=True` runs the backend in this process (tests,
    tools that have no other busy thread).
    """
    if in_process:
        from pocketchat.runtime.worker import make_backend

        return make_backend(plan, Path(path), name)
    from pocketchat.runtime.worker import WorkerEngine

    return WorkerEngine(plan, Path(path), name=name)
