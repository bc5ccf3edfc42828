"""Several answers at once (`serve --parallel N`): batched decoding gives the same tokens as one
at a time, a cancelled or disconnected answer frees its sequence, /health shows the slots."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from pocketchat.engines.types import ChatOptions, Message
from pocketchat.types import LoadPlan
from support.hostrun import generate

PROMPTS = ["Name a fruit.", "Count to five.", "What is the capital of France?",
           "Say hello in Spanish."]


def _plan(n_ctx: int, parallel: int) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=2, n_threads_batch=2, parallel=parallel)


def _answer(engine, prompt: str, max_tokens: int) -> tuple[str, int]:
    text, last = "", None
    for chunk in engine.chat([Message("user", prompt)],
                             ChatOptions(temperature=0, max_tokens=max_tokens)):
        text += chunk.text
        last = chunk
    assert last is not None and last.finish_reason in ("stop", "length"), last
    return text, last.stats.generated_tokens


def _together(slots, prompts: list[str], max_tokens: int) -> list[tuple[str, int]]:
    out: list = [None] * len(prompts)
    start = threading.Barrier(len(prompts))

    def run(i: int) -> None:
        start.wait()
        out[i] = _answer(slots, prompts[i], max_tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return out


def _same_tokens_batched_and_alone(path: Path, max_tokens: int) -> None:
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.batch.sequences import Sequences

    alone_engine = LlamaCppEngine(_plan(1024, 1), path, name="alone")
    try:
        alone = [_answer(alone_engine, p, max_tokens) for p in PROMPTS]
    finally:
        alone_engine.close()
    root = LlamaCppEngine(_plan(1024, len(PROMPTS)), path, name="batched")
    slots = Sequences(root.sequence_engines())
    try:
        assert root.n_ctx == 1024  # each sequence has the plan's context
        together = _together(slots, PROMPTS, max_tokens)
        assert root.batcher.max_width >= 2, "the answers were never decoded in one batch"
    finally:
        slots.close()
    assert together == alone


@pytest.mark.slow
def test_batched_greedy_answers_are_token_for_token_those_of_one_at_a_time(starter_gguf):
    _same_tokens_batched_and_alone(starter_gguf, 48)


@pytest.mark.slow
def test_batched_greedy_on_the_hybrid_qwen35moe_each_sequence_its_own_recurrent_state(
        tiny_qwen35moe):
    _same_tokens_batched_and_alone(tiny_qwen35moe, 24)


@pytest.mark.slow
def test_a_cancelled_sequence_leaves_the_batch_and_frees_its_slot(starter_gguf):
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.batch.sequences import Sequences

    root = LlamaCppEngine(_plan(512, 2), starter_gguf, name="batched")
    slots = Sequences(root.sequence_engines())
    try:
        opts = ChatOptions(temperature=0, max_tokens=64, ignore_eos=True)
        first = slots.chat([Message("user", "Tell a long story.")], opts)
        second = slots.chat([Message("user", "Tell another story.")], opts)
        assert slots.busy == 2
        next(first), next(second)
        first.cancel()
        ends = [c.finish_reason for c in first]
        assert ends[-1] == "cancelled"
        assert slots.busy == 1
        n = 0
        for chunk in second:  # the other answer goes on alone to its cap
            n = chunk.stats.generated_tokens
        assert n == 64 and slots.busy == 0
    finally:
        slots.close()


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    return 0


def _worker_pid(server_pid: int) -> int:
    kids = [k for task in Path(f"/proc/{server_pid}/task").iterdir()  # any thread's children
            for k in (task / "children").read_text().split()]
    for kid in kids:
        cmd = Path(f"/proc/{kid}/cmdline").read_bytes()
        if b"pocketchat-engine" in cmd:  # process.BOOT names it
            return int(kid)
    raise AssertionError(f"no worker among {kids}")


def _streams(srv, count: int, seed: int) -> list[str]:
    """`count` concurrent streams; a random half disconnect after a few chunks."""
    import httpx

    rng = random.Random(seed)
    ends: list[str] = [""] * count

    def one(i: int) -> None:
        drop = rng.random() < 0.5
        keep = rng.randint(1, 6)
        body = {"model": "starter", "stream": True, "max_tokens": 32, "temperature": 0,
                "messages": [{"role": "user", "content": f"Story number {i}, please."}]}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body,
                          timeout=300) as resp:
            if resp.status_code != 200:
                resp.read()
                ends[i] = f"{resp.status_code} {resp.text[:300]}"
                return
            seen = 0
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    seen += 1
                    if drop and seen >= keep:
                        ends[i] = "dropped"
                        return
            ends[i] = "done"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return ends


@pytest.mark.slow
def test_sixteen_streams_with_disconnects_free_every_sequence_and_memory(tmp_path):
    from support.serverproc import running

    with running(["--model", "starter", "--ctx", "512", "--parallel", "4", "--queue", "16"],
                 tmp_path) as srv:
        status, health = srv.get("/health")
        assert health["slots"] == {"total": 4, "busy": 0} and health["queued"] == 0
        seen: list[dict] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                seen.append(srv.get("/health")[1])
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            warm = _streams(srv, 16, seed=1)
        finally:
            stop.set()
            watcher.join()
        assert set(warm) <= {"done", "dropped"}, warm
        assert max(h["slots"]["busy"] for h in seen) == 4
        assert max(h["queued"] for h in seen) >= 1
        worker = _worker_pid(srv.pid)
        # the prompt cache keeps recent conversations' states on purpose (within its budget):
        # memory besides it must come back
        after_warmup = _rss(worker) - srv.get("/health")[1]["cache"]["bytes"]
        ends = _streams(srv, 16, seed=2)
        assert set(ends) <= {"done", "dropped"} and "dropped" in ends, ends
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            health = srv.get("/health")[1]
            if health["slots"]["busy"] == 0 and health["queued"] == 0:
                break
            time.sleep(0.05)
        assert health["slots"] == {"total": 4, "busy": 0} and health["queued"] == 0
        # every sequence is free again: four answers run at once
        client = srv.openai()
        results: list = [None] * 4

        def ask(i: int) -> None:
            results[i] = client.chat.completions.create(
                model="starter", max_tokens=8, temperature=0,
                messages=[{"role": "user", "content": f"Hi {i}"}])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(r is not None and r.choices[0].finish_reason in ("stop", "length")
                   for r in results)
        cache = srv.get("/health")[1]["cache"]
        assert cache["bytes"] <= cache["budget"]
        grown = _rss(worker) - cache["bytes"] - after_warmup
        assert grown <= 16 * 2**20, f"the worker grew by {grown / 2**20:.1f} MiB besides its cache"


def test_the_host_runs_n_answers_at_once_queues_the_rest_and_health_shows_both():
    import asyncio

    from support.scripted_engine import HeldEngine
    from pocketchat.server.host import EngineHost

    release = threading.Event()

    async def main() -> list[dict]:
        host = EngineHost(lambda: HeldEngine(release), sequences=2, queue_size=4)
        await host.start()
        seen = [host.health()]

        async def one() -> str:
            async with generate(host, (Message("user", "hi"),), ChatOptions()) as answer:
                return [c.finish_reason async for c in answer][-1]

        tasks = [asyncio.create_task(one()) for _ in range(3)]
        while not (host.running == 2 and host.waiting == 1):
            await asyncio.sleep(0.01)
        seen.append(host.health())
        release.set()
        assert await asyncio.gather(*tasks) == ["stop"] * 3
        seen.append(host.health())
        await host.stop()
        return seen

    before, during, after = asyncio.run(main())
    assert before["slots"] == {"total": 2, "busy": 0}
    assert during["slots"] == {"total": 2, "busy": 2} and during["queued"] == 1 and during["busy"]
    assert after["slots"]["busy"] == 0 and after["queued"] == 0 and not after["busy"]


def test_health_says_when_the_backend_answers_one_at_a_time():
    from pocketchat.server.host import EngineHost

    host = EngineHost(lambda: None, sequences=1, one_at_a_time="mlx answers one at a time")
    health = host.health()
    assert health["slots"]["total"] == 1
    assert health["parallel_note"] == "mlx answers one at a time"
