"""An idle server sleeps: the worker's beat pauses while nothing is in flight and its silence is
then no verdict, the host's watcher looks about once a second while idle (never once unloaded)
and closely again as soon as a request comes, and a stopped worker is still seen while idle."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
from support.scripted_engine import HeldEngine

from pocketchat.engines.types import ChatOptions, Liveness, Message
from pocketchat.engines.worker.child import Beat
from pocketchat.engines.worker.liveness import SILENCE, Watch
from pocketchat.server.host import IDLE_POLL, LIVENESS_POLL, EngineHost
from support.hostrun import generate

HI = (Message("user", "hi"),)


def test_an_idle_worker_that_says_nothing_still_responds_and_a_stopped_one_does_not():
    watch = Watch(100.0)
    assert watch.judge(160.0, stopped=False, cpu_seconds=1.0, expecting=False).responding
    found = watch.judge(161.0, stopped=True, cpu_seconds=1.0, expecting=False)
    assert not found.responding and found.reason == "stopped"
    assert watch.judge(162.0, stopped=False, cpu_seconds=1.0, expecting=False).responding


def test_a_request_after_a_long_idle_gives_the_worker_time_to_be_heard_then_judges_it():
    watch = Watch(100.0)
    watch.judge(200.0, stopped=False, cpu_seconds=1.0, expecting=False)
    watch.expect(200.0)  # a request after 100 s of a paused beat
    assert watch.judge(200.5, stopped=False, cpu_seconds=1.0).responding
    stuck = watch.judge(200.0 + SILENCE + 0.5, stopped=False, cpu_seconds=1.0)
    assert not stuck.responding and stuck.reason == "silent"


def test_the_beat_pauses_with_nothing_in_flight_and_comes_at_once_with_a_request():
    beats: list[float] = []
    beat = Beat(lambda msg: beats.append(time.monotonic()), interval=0.05)
    threading.Thread(target=beat.run, daemon=True).start()
    time.sleep(0.3)
    assert len(beats) >= 3  # the load counts as in flight
    beat.end()
    time.sleep(0.1)
    paused = len(beats)
    time.sleep(0.4)
    assert len(beats) == paused  # nothing in flight: no beat at all
    asked = time.monotonic()
    beat.begin()
    time.sleep(0.02)
    assert len(beats) == paused + 1 and beats[-1] - asked < 0.02  # the first at once
    time.sleep(0.3)
    assert len(beats) >= paused + 4  # then every interval while it is in flight
    beat.end()


class CountedHeld(HeldEngine):
    """Each answer holds until released; `liveness()` counts the host's looks."""

    def __init__(self) -> None:
        super().__init__(threading.Event(), sequences=1)
        self.looks: list[float] = []

    def liveness(self) -> Liveness:
        self.looks.append(time.monotonic())
        return Liveness()

    def kill(self) -> None:
        pass


def test_the_watcher_looks_once_a_second_while_idle_and_closely_while_an_answer_runs():
    engine = CountedHeld()

    async def main() -> None:
        host = EngineHost(lambda: engine)
        await host.start()
        while host.state != "ready":
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        engine.looks.clear()
        await asyncio.sleep(3.0)
        idle = len(engine.looks)
        assert 2 <= idle <= 3.0 / IDLE_POLL + 1, idle

        async def answer() -> None:
            async with generate(host, HI, ChatOptions()) as streaming:
                async for _ in streaming:
                    pass

        engine.looks.clear()
        asked = time.monotonic()
        task = asyncio.create_task(answer())
        await asyncio.sleep(1.0)
        busy = engine.looks
        assert busy and busy[0] - asked < LIVENESS_POLL + 0.1  # at once, not after the idle poll
        assert len(busy) >= 3, len(busy)
        engine.release.set()
        await asyncio.wait_for(task, 5)
        await host.stop()

    asyncio.run(main())


def test_an_unloaded_host_does_not_wake_until_a_request_comes():
    engines: list[CountedHeld] = []

    def opener() -> CountedHeld:
        engines.append(CountedHeld())
        engines[-1].release.set()
        return engines[-1]

    async def main() -> None:
        host = EngineHost(opener, idle_unload=0.5)
        await host.start()
        while host.state != "idle":
            await asyncio.sleep(0.05)
        watcher = host._watcher
        assert watcher is not None and not watcher.done()
        looks = len(engines[0].looks)
        await asyncio.sleep(2.5)
        assert len(engines[0].looks) == looks and host.state == "idle"  # nothing to watch
        async with generate(host, HI, ChatOptions()) as streaming:
            chunks = [c async for c in streaming]
        assert chunks[-1].finish_reason == "stop" and len(engines) == 2
        await asyncio.sleep(IDLE_POLL + 0.5)
        assert engines[1].looks  # watched again once loaded
        await host.stop()

    asyncio.run(main())


def _voluntary_switches(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:
            continue
        total += int(text.split("voluntary_ctxt_switches:")[1].split()[0])
    return total


@pytest.mark.slow
def test_a_real_idle_worker_sleeps_and_a_stopped_one_is_still_seen(starter_gguf):
    from support.engine_makers import llama_plan

    from pocketchat.engines.worker.parent import WorkerEngine

    engine = WorkerEngine(llama_plan(512), starter_gguf)
    try:
        final = list(engine.chat(list(HI), ChatOptions(max_tokens=4, ignore_eos=True)))[-1]
        assert final.finish_reason == "length"
        time.sleep(1.0)  # the answer settles
        before, start = _voluntary_switches(engine.pid), time.monotonic()
        time.sleep(5.0)
        rate = (_voluntary_switches(engine.pid) - before) / (time.monotonic() - start)
        print(f"idle worker: {rate:.2f} wakeups/s")
        assert rate < 1.0
        assert engine.liveness().responding  # silent, idle: no verdict
        os.kill(engine.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 2.0
            while engine.liveness().responding:
                assert time.monotonic() < deadline, "a stopped idle worker was not seen"
                time.sleep(0.05)
            assert engine.liveness().reason == "stopped"
        finally:
            os.kill(engine.pid, signal.SIGCONT)
        deadline = time.monotonic() + 2.0
        while not engine.liveness().responding:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        final = list(engine.chat(list(HI), ChatOptions(max_tokens=4, ignore_eos=True)))[-1]
        assert final.finish_reason == "length"  # a request after a long silence is answered
    finally:
        engine.close()
