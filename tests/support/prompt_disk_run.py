"""One engine's life in its own process, for the disk tier's tests and benchmark: load the model,
answer one conversation greedily, close (the disk writes finish), print the figures as JSON.

    python -m support.prompt_disk_run MODEL DISK_BYTES SYSTEM_FILE USER [N_CTX]

`wire` is what the engine's `_prompt_cache` does once base.py passes the disk tier
(`PromptCache(budget, disk=DiskTier.open(plan, state_key))`); until then it adds it here."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def wire(engine) -> None:
    """Give `engine`'s prompt cache its disk tier, as the engine does itself once wired."""
    from pocketchat.engines.state.prompt_disk import DiskTier

    if engine.prompt_cache.disk is None and hasattr(engine.cache.ops, "seq_payload"):
        engine.prompt_cache.disk = DiskTier.open(engine.plan, engine._state_key())


def plan(disk_bytes: int, n_ctx: int = 4096, threads: int = 1):
    from pocketchat.types import LoadPlan

    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=threads, n_threads_batch=threads, prompt_cache_bytes=256 * 1024**2,
                    prompt_cache_disk_bytes=disk_bytes)


def run(model: Path, disk_bytes: int, system: str, user: str, n_ctx: int = 4096,
        threads: int = 1, max_tokens: int = 8) -> dict:
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.types import ChatOptions, Message

    began = time.perf_counter()
    engine = LlamaCppEngine(plan(disk_bytes, n_ctx, threads), model, name=model.stem)
    loaded = time.perf_counter() - began
    wire(engine)
    options = ChatOptions(temperature=0, max_tokens=max_tokens, ignore_eos=True, thinking=False)
    try:
        asked = time.perf_counter()
        chunks, first = [], None
        for chunk in engine.chat([Message("system", system), Message("user", user)], options):
            if first is None and (chunk.text or chunk.thinking):
                first = time.perf_counter() - asked
            chunks.append(chunk)
        final = chunks[-1]
        if final.error:
            raise SystemExit(f"the answer failed: {final.error}")
    finally:
        closing = time.perf_counter()
        engine.close()  # waits for the disk tier's writes
        closed = time.perf_counter() - closing
    stats = final.stats
    return {"answer": "".join(c.text for c in chunks), "prompt_length": stats.prompt_length,
            "reused": stats.reused_tokens, "evaluated": stats.evaluated_tokens,
            "ttft": stats.ttft_seconds if stats.ttft_seconds is not None else first,
            "load_seconds": loaded, "close_seconds": closed,
            "status": engine.prompt_cache.status()}


def main(argv: list[str]) -> None:
    model, disk, system, user = Path(argv[0]), int(argv[1]), Path(argv[2]).read_text(), argv[3]
    n_ctx = int(argv[4]) if len(argv) > 4 else 4096
    threads = int(argv[5]) if len(argv) > 5 else 1
    print(json.dumps(run(model, disk, system, user, n_ctx, threads)))


if __name__ == "__main__":
    main(sys.argv[1:])
