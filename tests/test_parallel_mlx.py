"""MLX answers several at once (`serve --parallel N` on MLX), on the real mlx[cpu] with the tiny
random qwen3_5_moe (POCKET's architecture: Gated-DeltaNet `ArraysCache` + `KVCache` layers):
batched greedy answers are token for token those of one at a time, a cancelled sequence frees
its slot while the others go on, a sequence's next turn evaluates only the new message, the
server answers 4 clients at once, and a model whose caches cannot be merged answers one at a
time and says so."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pocketchat.engines.state.prefix_cache import common_prefix
from pocketchat.engines.types import ChatOptions, EngineInfo, Message
from pocketchat.types import LoadPlan
from support.hostrun import generate

PROMPTS = ["Name a fruit.", "Count to five.", "What is the capital of France?",
           "Say hello in Spanish."]
GREEDY = ChatOptions(temperature=0, max_tokens=24)


def _plan(parallel: int, n_ctx: int = 1024) -> LoadPlan:
    return LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx, n_threads=2,
                    n_threads_batch=2, parallel=parallel)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory) -> Path:
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import write_tiny_qwen35_moe

    return write_tiny_qwen35_moe(tmp_path_factory.mktemp("mlx") / "tiny-qwen35moe")


def _engine(path: Path, parallel: int):
    from pocketchat.engines.mlx.engine import MlxEngine

    return MlxEngine(_plan(parallel), path, name="tiny")


def _answer(engine, messages, options: ChatOptions = GREEDY):
    """(text, generated tokens, the final chunk)."""
    chunks = list(engine.chat(messages, options))
    last = chunks[-1]
    assert last.finish_reason in ("stop", "length"), last
    return "".join(c.text for c in chunks), last.stats.generated_tokens, last


def _together(slots, conversations: list[list[Message]]) -> list:
    out: list = [None] * len(conversations)
    start = threading.Barrier(len(conversations))

    def run(i: int) -> None:
        start.wait()
        out[i] = _answer(slots, conversations[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(conversations))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return out


def _alone(path: Path, conversations: list[list[Message]]) -> list:
    engine = _engine(path, 1)
    try:
        assert engine.batcher.solo and engine._batch is None  # one sequence: no batch
        return [_answer(engine, c)[:2] for c in conversations]
    finally:
        engine.close()


@pytest.mark.slow
def test_batched_greedy_answers_are_token_for_token_those_of_one_at_a_time(hybrid):
    from pocketchat.engines.batch.sequences import Sequences

    conversations = [[Message("user", p)] for p in PROMPTS]
    alone = _alone(hybrid, conversations)
    root = _engine(hybrid, len(PROMPTS))
    slots = Sequences(root.sequence_engines())
    try:
        assert slots.sequences == 4 and slots.info.sequences == 4
        together = [r[:2] for r in _together(slots, conversations)]
        assert root._batch.max_rows >= 2, "the answers were never decoded in one batch"
    finally:
        slots.close()
    assert together == alone


@pytest.mark.slow
def test_a_cancelled_sequence_frees_its_slot_while_the_other_goes_on(hybrid):
    from pocketchat.engines.batch.sequences import Sequences

    long = ChatOptions(temperature=0, max_tokens=160, ignore_eos=True)
    other = [Message("user", "Tell another story.")]
    expected = None
    engine = _engine(hybrid, 1)
    try:
        expected = _answer(engine, other, long)[:2]
    finally:
        engine.close()
    root = _engine(hybrid, 2)
    slots = Sequences(root.sequence_engines())
    try:
        first = slots.chat([Message("user", "Tell a long story.")], long)
        second = slots.chat(other, long)
        assert slots.busy == 2
        got: dict = {}

        def read_second() -> None:
            chunks = list(second)
            got["text"] = "".join(c.text for c in chunks)
            got["n"] = chunks[-1].stats.generated_tokens
            got["end"] = chunks[-1].finish_reason

        reader = threading.Thread(target=read_second)
        reader.start()
        for _ in range(8):
            next(first)
        first.cancel()
        ends = [c.finish_reason for c in first]
        assert ends[-1] == "cancelled"
        assert slots.busy == 1 and reader.is_alive(), "the other answer should still be going"
        reader.join(300)
        assert got["end"] == "length" and (got["text"], got["n"]) == expected
        assert slots.busy == 0
        assert root._batch.max_rows == 2
        # the cancelled sequence answers again, in its own time
        assert _answer(slots, [Message("user", "Hi")])[2].finish_reason in ("stop", "length")
    finally:
        slots.close()


@pytest.mark.slow
def test_the_next_turn_after_a_batched_answer_evaluates_only_the_new_message(hybrid):
    from pocketchat.engines.batch.sequences import Sequences

    firsts = [[Message("user", p)] for p in PROMPTS[:2]]
    root = _engine(hybrid, 2)
    slots = Sequences(root.sequence_engines())
    try:
        turn1 = _together(slots, firsts)
        assert root._batch.max_rows == 2
        follows = [[*c, Message("assistant", t[0]), Message("user", "And then?")]
                   for c, t in zip(firsts, turn1, strict=False)]
        turn2 = _together(slots, follows)
        for follow, first, (_text, _n, final) in zip(follows, firsts, turn2, strict=False):
            whole = root._encode(root.render(follow, GREEDY.thinking, options=GREEDY))
            held = root.history_tokens((*first, follow[1]), GREEDY.thinking, GREEDY)
            kept = common_prefix(held, whole)
            assert kept > len(whole) // 2
            assert final.stats.reused_tokens == kept
            assert final.stats.prompt_tokens == len(whole) - kept  # only the new message
    finally:
        slots.close()
    assert [t[:2] for t in turn2] == _alone(hybrid, follows)  # the cache changes the cost only


@pytest.mark.slow
def test_the_server_answers_four_mlx_clients_at_once(hybrid, tmp_path):
    from support.serverproc import running

    args = ["--model", str(hybrid), "--backend", "mlx", "--ctx", "512", "--parallel", "4"]
    with running(args, tmp_path) as srv:
        health = srv.get("/health")[1]
        assert health["slots"] == {"total": 4, "busy": 0} and "parallel_note" not in health
        model = srv.get("/v1/models")[1]["data"][0]["id"]
        seen: list[int] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                seen.append(srv.get("/health")[1]["slots"]["busy"])
                time.sleep(0.01)

        client = srv.openai()
        results: list = [None] * 4

        def ask(i: int) -> None:
            results[i] = client.chat.completions.create(
                model=model, max_tokens=96, temperature=0, extra_body={"ignore_eos": True},
                messages=[{"role": "user", "content": PROMPTS[i]}])

        watcher = threading.Thread(target=watch)
        watcher.start()
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
        finally:
            stop.set()
            watcher.join()
        assert all(r is not None and r.choices[0].finish_reason == "length"
                   and r.usage.completion_tokens == 96 for r in results), results
        assert max(seen) == 4
        assert srv.get("/health")[1]["slots"] == {"total": 4, "busy": 0}


@pytest.mark.slow
def test_caches_that_cannot_be_merged_answer_one_at_a_time_and_say_why(monkeypatch):
    pytest.importorskip("mlx_lm")
    import mlx_lm.models.cache as cache_mod
    from support.mlx_fixture import shared_model
    from pocketchat.engines.worker.child import make_backend
    from pocketchat.engines.mlx.engine import MlxEngine

    monkeypatch.setattr(cache_mod, "make_prompt_cache", lambda model, max_kv_size=None:
                        [cache_mod.QuantizedKVCache() for _ in model.layers])
    engine = make_backend(_plan(4), shared_model(), "tiny")
    try:
        assert isinstance(engine, MlxEngine)  # no Sequences: one sequence
        assert engine.sequence_engines() == [engine] and engine.batcher.solo
        assert engine.info.sequences == 1
        assert "QuantizedKVCache" in engine.info.parallel_note
        assert "one at a time" in engine.info.parallel_note
    finally:
        engine.close()


def test_the_host_takes_the_engines_own_count_and_health_says_why():
    import asyncio

    from support.scripted_engine import HeldEngine
    from pocketchat.server.host import EngineHost

    release = threading.Event()
    note = "mlx answers one at a time with this model: its QuantizedKVCache cache cannot be batched"

    info = EngineInfo(backend="mlx", model="m", placement="CPU", n_ctx=512, parallel_note=note)
    # what WorkerEngine says of an MLX model it cannot batch
    one_at_a_time = lambda: HeldEngine(release, sequences=1, info=info)  # noqa: E731

    async def main() -> tuple[dict, int]:
        host = EngineHost(one_at_a_time, sequences=4, queue_size=4)
        await host.start()

        async def one() -> str:
            async with generate(host, (Message("user", "hi"),), ChatOptions()) as answer:
                return [c.finish_reason async for c in answer][-1]

        tasks = [asyncio.create_task(one()) for _ in range(3)]
        deadline = time.monotonic() + 10
        while host.running + host.waiting < 3 or host.running == 0:
            assert time.monotonic() < deadline, host.health()
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # time for more to start, were there more places
        during, most = host.health(), host.running
        release.set()
        assert await asyncio.gather(*tasks) == ["stop"] * 3
        await host.stop()
        return during, most

    during, most = asyncio.run(main())
    assert most == 1
    assert during["slots"] == {"total": 1, "busy": 1} and during["queued"] == 2
    assert during["parallel_note"] == note
