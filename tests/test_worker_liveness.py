"""A real worker (the starter) that stops answering: SIGSTOP mid-answer is known within 2 s
through the engine's API, cancel lets the answer go at once, new requests are refused with
`EngineNotResponding`, kill and a new engine work, SIGCONT recovers; a worker busy reading a
long prompt is never taken for a stuck one."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from support.engine_makers import llama_plan
from pocketchat.engines.types import NOT_RESPONDING, ChatOptions, Message, WatchedEngine
from pocketchat.engines.worker.parent import WorkerEngine
from pocketchat.errors import EngineCrashed, EngineNotResponding

pytestmark = pytest.mark.slow  # real models and processes: the second CI lane

LONG = ChatOptions(max_tokens=2000, ignore_eos=True)
STORY = [Message("user", "Tell me a long story.")]


def wait_until(condition, timeout: float) -> float:
    """Seconds until `condition()` held (polled every 20 ms); fails after `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.fixture
def worker(starter_gguf):
    engine = WorkerEngine(llama_plan(512), starter_gguf)
    yield engine
    try:
        os.kill(engine.pid, signal.SIGCONT)
    except OSError:
        pass
    engine.close()


def test_sigstop_mid_answer_is_known_within_two_seconds_and_a_restart_works(worker, starter_gguf):
    assert isinstance(worker, WatchedEngine)
    it = worker.chat(STORY, LONG)
    assert next(it).finish_reason is None
    assert worker.liveness().responding
    os.kill(worker.pid, signal.SIGSTOP)
    took = wait_until(lambda: not worker.liveness().responding, 2.0)
    print(f"not responding after {took:.2f} s")
    found = worker.liveness()
    assert found.reason == "stopped" and found.message.startswith(NOT_RESPONDING)

    start = time.monotonic()  # new requests: refused at once, saying why
    with pytest.raises(EngineNotResponding, match=NOT_RESPONDING):
        list(worker.chat([Message("user", "hi")], LONG))
    with pytest.raises(EngineNotResponding):
        worker.status()
    assert time.monotonic() - start < 1.0

    start = time.monotonic()  # Esc: the answer ends at once, its text kept by the caller
    worker.cancel()
    rest = list(it)
    assert rest[-1].finish_reason == "cancelled"
    assert time.monotonic() - start < 1.0

    start = time.monotonic()  # Ctrl+R: the stuck worker is killed without waiting for it
    pid = worker.pid
    worker.kill()
    assert time.monotonic() - start < 1.0
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"

    again = WorkerEngine(llama_plan(512), starter_gguf)
    try:
        final = list(again.chat(STORY, ChatOptions(max_tokens=8, ignore_eos=True)))[-1]
        assert final.finish_reason == "length" and final.stats.generated_tokens == 8
        assert again.liveness().responding
    finally:
        again.close()


def test_a_worker_killed_because_it_did_not_respond_is_not_blamed_on_memory(worker):
    it = worker.chat(STORY, LONG)
    next(it)
    os.kill(worker.pid, signal.SIGSTOP)
    wait_until(lambda: not worker.liveness().responding, 2.0)
    threading.Timer(0.3, worker.kill).start()  # the reader still waits for the next chunk
    with pytest.raises(EngineCrashed) as info:
        list(it)
    message = info.value.message
    assert "not responding" in message
    assert "memory" not in message and "SIGKILL" not in message, message


def test_sigcont_before_a_restart_recovers_the_answer_and_the_engine(worker):
    it = worker.chat(STORY, ChatOptions(max_tokens=40, ignore_eos=True))
    next(it)
    os.kill(worker.pid, signal.SIGSTOP)
    wait_until(lambda: not worker.liveness().responding, 2.0)
    time.sleep(1.0)
    os.kill(worker.pid, signal.SIGCONT)
    took = wait_until(lambda: worker.liveness().responding, 1.0)
    print(f"responding again {took:.2f} s after SIGCONT")
    final = list(it)[-1]  # the answer in flight goes on to its end
    assert final.finish_reason == "length" and final.stats.generated_tokens == 40

    it = worker.chat(STORY, LONG)  # an answer let go while stopped does not leak into the next
    next(it)
    os.kill(worker.pid, signal.SIGSTOP)
    wait_until(lambda: not worker.liveness().responding, 2.0)
    worker.cancel()
    assert list(it)[-1].finish_reason == "cancelled"
    os.kill(worker.pid, signal.SIGCONT)
    wait_until(lambda: worker.liveness().responding, 1.0)
    chunks = list(worker.chat([Message("user", "Say hi.")], ChatOptions(max_tokens=6, ignore_eos=True)))
    assert chunks[-1].finish_reason == "length" and chunks[-1].stats.generated_tokens == 6
    assert sum(1 for c in chunks if c.finish_reason) == 1
    assert worker.status() is not None  # calls work again too


def test_a_long_prompt_read_in_one_native_call_keeps_the_beat(starter_gguf):
    """llama_decode runs through ctypes, which releases the GIL: the child's beat goes on
    while one big batch of a long prompt is evaluated (seconds), so it is never reported."""
    from dataclasses import replace

    plan = replace(llama_plan(4096), n_batch=4096)
    engine = WorkerEngine(plan, starter_gguf)
    try:
        words = " ".join(f"word{i}" for i in range(300))
        seen = []
        gaps = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                seen.append(engine.liveness())
                gaps.append(time.monotonic() - engine._reader.watch.last_heard)
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        start = time.monotonic()
        chunks = list(engine.chat([Message("user", words + "\nSay OK.")],
                                  ChatOptions(max_tokens=2, ignore_eos=True)))
        took = time.monotonic() - start
        done.set()
        watcher.join()
        stats = chunks[-1].stats
        print(f"prompt of {stats.prompt_tokens} tokens read in {stats.prompt_seconds:.2f} s "
              f"(answer {took:.2f} s); longest time without a word from the worker: {max(gaps):.2f} s")
        assert stats.prompt_tokens > 1000 and stats.prompt_seconds > 0.5
        assert all(v.responding for v in seen)
        assert max(gaps) < 1.0  # beats kept coming during the native decode
    finally:
        engine.close()
