"""The server's host with an engine whose process stops responding (a scripted `WatchedEngine`,
the host's clock given): answers in flight end at once with a 503, new requests get it too,
/health says so; a resumed engine is ready again; one that does not resume is restarted."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from support.scripted_engine import HeldEngine

from pocketchat.engines.types import NOT_RESPONDING, ChatOptions, Liveness, Message
from pocketchat.errors import ApiError
from pocketchat.server.host import EngineHost
from support.hostrun import generate

HI = (Message("user", "hi"),)


class StuckHeld(HeldEngine):
    """Each answer holds after its first chunk until released or cancelled; `alive` is what
    `liveness()` says; `kill()` is counted."""

    def __init__(self) -> None:
        super().__init__(threading.Event())
        self.alive = Liveness()
        self.killed = 0

    def liveness(self) -> Liveness:
        return self.alive

    def kill(self) -> None:
        self.killed += 1


async def answer(host: EngineHost) -> str | None:
    async with generate(host, HI, ChatOptions()) as streaming:
        return [c.finish_reason async for c in streaming][-1]


def test_the_host_refuses_while_stuck_recovers_on_resume_and_restarts_when_it_does_not():
    engines: list[StuckHeld] = []

    def opener() -> StuckHeld:
        engines.append(StuckHeld())
        return engines[-1]

    async def main() -> None:
        host = EngineHost(opener, restart_stuck=30.0)
        await host.start()
        while host.state != "ready":
            await asyncio.sleep(0.01)
        first = engines[0]
        in_flight = asyncio.create_task(answer(host))
        while host.running != 1:
            await asyncio.sleep(0.01)

        first.alive = Liveness(False, 0.3, "stopped")  # SIGSTOP
        now = time.monotonic()
        host.check_liveness(now)
        assert host.state == "not_responding"
        with pytest.raises(ApiError) as ended:  # the answer in flight: a 503 at once
            await asyncio.wait_for(in_flight, 5)
        assert ended.value.status == 503 and ended.value.code == "model_not_responding"
        assert NOT_RESPONDING in ended.value.message and "30 s" in ended.value.message
        health = host.health()
        assert health["status"] == "not_responding" and NOT_RESPONDING in health["error"]
        assert health["not_responding"]["reason"] == "stopped"
        with pytest.raises(ApiError) as refused:  # a new request: the same 503
            await answer(host)
        assert refused.value.status == 503 and refused.value.code == "model_not_responding"
        assert refused.value.headers["Retry-After"]

        first.alive = Liveness()  # SIGCONT
        host.check_liveness(time.monotonic())
        assert host.state == "ready" and host.previous == "not_responding"
        assert "error" not in host.health() and "not_responding" not in host.health()
        first.release.set()
        assert await asyncio.wait_for(answer(host), 5) == "stop"
        assert host.restarts == 0 and first.killed == 0

        first.alive = Liveness(False, 2.0, "silent")  # stuck again, and it stays so
        now = time.monotonic()
        host.check_liveness(now)
        host.check_liveness(now + 31)
        assert host.restarts == 1
        while not (host.state == "ready" and len(engines) == 2):
            await asyncio.sleep(0.01)
        assert first.killed == 1 and host.engine is engines[1]
        engines[1].release.set()
        assert await asyncio.wait_for(answer(host), 5) == "stop"
        await host.stop()

    asyncio.run(main())
