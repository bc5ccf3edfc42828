"""Engines the contract tests run against: one `pytest.param(maker, id=...)` per engine.

A maker takes the context size and returns a loaded `Engine` on a small real model. To run the
contract against another backend, append one line to MAKERS.
"""

from __future__ import annotations

import pytest

from pocketchat.types import LoadPlan


def llama_plan(n_ctx: int) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=2, n_threads_batch=2)


def make_llama_in_process(n_ctx: int):
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.store.starter import starter_path

    return LlamaCppEngine(llama_plan(n_ctx), starter_path(), name="starter")


def make_llama_worker(n_ctx: int):
    from pocketchat.store.starter import starter_path
    from pocketchat.engines.worker.parent import WorkerEngine

    return WorkerEngine(llama_plan(n_ctx), starter_path(), name="starter")


def make_llama_worker_at_chat_pace(n_ctx: int):
    """The worker as the chat opens it: text sent at most every CHUNK_INTERVAL."""
    from pocketchat.store.starter import starter_path
    from pocketchat.engines.worker.parent import WorkerEngine
    from pocketchat.ui.streaming import CHUNK_INTERVAL

    return WorkerEngine(llama_plan(n_ctx), starter_path(), name="starter",
                        chunk_interval=CHUNK_INTERVAL)


def make_mlx_in_process(n_ctx: int):
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import shared_model
    from pocketchat.engines.mlx.engine import MlxEngine

    return MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                              n_threads=2, n_threads_batch=2), shared_model(), name="tiny-llama")


MAKERS = [
    pytest.param(make_llama_in_process, id="llama.cpp-in-process"),
    pytest.param(make_llama_worker, id="llama.cpp-worker"),
    pytest.param(make_llama_worker_at_chat_pace, id="llama.cpp-worker-chat-pace"),
    pytest.param(make_mlx_in_process, id="mlx-in-process"),
]
