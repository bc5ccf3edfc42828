"""The server with a worker that stops answering: the real `pocketchat serve` on the starter,
its worker stopped with SIGSTOP mid-stream (/health, the stream, new requests, SIGCONT), and
the host restarting a worker that does not resume."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import openai
import pytest

from support.engine_makers import llama_plan
from support.serverproc import running
from support.workerproc import state, worker_of
from pocketchat.engines.types import ChatOptions, Message, NOT_RESPONDING
from pocketchat.engines.worker.parent import WorkerEngine
from pocketchat.server.host import EngineHost
from support.hostrun import generate

pytestmark = pytest.mark.slow  # real models, servers and processes: the second CI lane

STORY = [{"role": "user", "content": "Tell me a long story."}]


def test_a_stopped_worker_is_a_clear_503_and_the_server_recovers_when_it_resumes(tmp_path):
    with running(["--model", "starter", "--ctx", "1024"], tmp_path) as srv:
        client = srv.openai(timeout=60)
        model = client.models.list().data[0].id
        worker = worker_of(srv.pid)
        stream = iter(client.chat.completions.create(
            model=model, messages=STORY, max_tokens=1500, stream=True,
            extra_body={"ignore_eos": True}))
        while not (next(stream).choices[0].delta.content or ""):
            pass  # the answer is under way
        os.kill(worker, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            with pytest.raises(openai.APIError) as info:  # the error event ends the stream
                for _ in stream:
                    pass
            ended = time.monotonic() - stopped_at
            print(f"the stream ended {ended:.2f} s after SIGSTOP: {info.value}")
            assert ended < 2.5
            assert NOT_RESPONDING in str(info.value)

            status, health = srv.get("/health")
            assert status == 503 and health["status"] == "not_responding", health
            assert health["not_responding"]["reason"] == "stopped"
            assert NOT_RESPONDING in health["error"]

            start = time.monotonic()
            status, body = srv.post_json("/v1/chat/completions",
                                         {"model": model, "messages": STORY, "max_tokens": 4})
            assert time.monotonic() - start < 1.0
            assert status == 503, body
            assert body["error"]["code"] == "model_not_responding"
            assert body["error"]["type"] == "server_error"
            assert NOT_RESPONDING in body["error"]["message"]
        finally:
            os.kill(worker, signal.SIGCONT)
        deadline = time.monotonic() + 2
        while srv.get("/health")[1]["status"] != "ready":
            assert time.monotonic() < deadline, srv.get("/health")
            time.sleep(0.05)
        answer = client.chat.completions.create(model=model, messages=STORY, max_tokens=5,
                                                extra_body={"ignore_eos": True})
        assert answer.choices[0].finish_reason == "length"
        assert srv.get("/health")[1]["restarts"] == 0  # recovered, not restarted
        assert worker_of(srv.pid) == worker
        assert "responds again" in srv.log()


def test_the_host_restarts_a_worker_that_does_not_resume(starter_gguf):
    async def scenario() -> None:
        host = EngineHost(lambda: WorkerEngine(llama_plan(512), starter_gguf), restart_stuck=1.5)
        await host.start()
        try:
            while host.state != "ready":
                await asyncio.sleep(0.05)
            first = host.engine
            os.kill(first.pid, signal.SIGSTOP)
            start = time.monotonic()
            while host.state != "not_responding":
                await asyncio.sleep(0.02)
            print(f"not_responding after {time.monotonic() - start:.2f} s")
            assert time.monotonic() - start < 2.0
            assert NOT_RESPONDING in host.health()["error"]
            while not (host.state == "ready" and host.restarts == 1):
                assert time.monotonic() - start < 60, host.health()
                await asyncio.sleep(0.05)
            assert host.engine is not first and state(first.pid) in ("gone", "zombie")
            assert "error" not in host.health()
            async with generate(host, (Message("user", "hi"),),
                                     ChatOptions(max_tokens=4, ignore_eos=True)) as answer:
                chunks = [c async for c in answer]
            assert chunks[-1].finish_reason == "length"
        finally:
            await host.stop()

    asyncio.run(scenario())
