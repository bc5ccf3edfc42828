"""Two processes over 127.0.0.1: `pocketchat rpc-server` in one, the starter model split over it in
the other (real llama.cpp RPC backend; skipped when llama-cpp-python was built without it)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from pocketchat import cli
from pocketchat.engines import open_engine
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.errors import HelperGone, HelperUnreachable, RpcUnavailable
from pocketchat.rpc import client, ggml, wire

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(ggml.rpc_library() is None,
                                                   reason="llama-cpp-python built without RPC")]
GREEDY = ChatOptions(temperature=0.0, seed=1, max_tokens=40, thinking=False)
QUESTION = [Message("user", "Name three colours.")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


class Server:
    """`pocketchat rpc-server` in its own process, on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pocketchat", "rpc-server", "--port", str(self.port), "--threads", "1"],
            cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while wire.reachable(self.endpoint, timeout=1.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"rpc-server did not start: {self.proc.stdout.read()}")
            time.sleep(0.2)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.kill()


def args_for(*extra: str):
    from pocketchat.choose.selection import Selection

    args = cli._root_parser().parse_args(["--model", "starter", "--ctx", "1024", "--offline", *extra])
    return Selection.from_args(args)


def pooled_choice(endpoint: str):
    from pocketchat.choose.model import choose_model

    choice = choose_model(args_for("--rpc", endpoint))
    plan = replace(choice.plan, n_threads=1, n_threads_batch=1)
    return replace(choice, plan=plan)


def answer(engine, messages=QUESTION, options=GREEDY) -> str:
    chunks = list(engine.chat(messages, options))
    assert chunks[-1].finish_reason in ("stop", "length"), chunks[-1]
    return "".join(c.text for c in chunks)


def test_the_helper_is_asked_for_its_memory_and_the_link_is_timed(server):
    h = wire.probe_helper(server.endpoint)
    assert h.total_bytes == psutil.virtual_memory().total and h.reports_total_as_free
    assert 0 < h.rtt_seconds < 0.5 and h.throughput_bytes_s > 1e6


def test_a_busy_helper_is_said_to_be_busy_and_serves_the_next_client(server):
    holder = wire.RpcWire(server.endpoint)  # another pocketchat holds the helper
    try:
        with pytest.raises(HelperUnreachable) as err:
            wire.probe_helper(server.endpoint, timeout=1.0)
        assert "is another pocketchat using it?" in err.value.message
        assert "is not a pocketchat" not in err.value.message
        assert holder.device_count() >= 1  # the holder's session is undisturbed
    finally:
        holder.close()
    deadline = time.monotonic() + 30  # the helper gets past the probe's connection, then answers
    while (why := wire.reachable(server.endpoint)) and time.monotonic() < deadline:
        pass
    assert why is None and server.proc.poll() is None


def test_pooled_starter_answers_like_the_local_one(server, starter_gguf):
    choice = pooled_choice(server.endpoint)
    plan = choice.plan
    assert plan.rpc_servers == (server.endpoint,) and plan.n_layers == 30
    on_helper = plan.rpc_layers[0]
    assert 0 < on_helper < 30, plan  # part of the layers, not all
    assert f"{on_helper} on {server.endpoint}" in plan.describe()
    local = replace(plan, rpc_servers=(), rpc_layers=(), n_gpu_layers=0)
    with_helper = open_engine(plan, choice.path, name=choice.name)
    try:
        assert f"on {server.endpoint}" in with_helper.info.placement  # the chat's header line
        pooled_text = answer(with_helper)
    finally:
        with_helper.close()
    alone = open_engine(local, choice.path, name=choice.name)
    try:
        assert answer(alone) == pooled_text and pooled_text.strip()
    finally:
        alone.close()


def test_the_layers_really_sit_on_the_rpc_device(server, starter_gguf):
    from pocketchat.engines.llamacpp.load import load_llama
    from pocketchat.modelfile.gguf import check_gguf

    plan = pooled_choice(server.endpoint).plan
    loaded = load_llama(plan, starter_gguf, check_gguf(starter_gguf))
    try:
        log = "\n".join(loaded.log)
        assert "RPC0" in log and f"offloaded {plan.n_gpu_layers}/31 layers" in log, log[-2000:]
        # the connection to the helper gets keepalive + TCP_USER_TIMEOUT (a dropped network is noticed)
        assert client.tune_helper_sockets(plan.rpc_servers) >= 1
    finally:
        loaded.llm.close()


def test_killing_the_helper_mid_answer_ends_it_clearly(server, starter_gguf):
    plan = pooled_choice(server.endpoint).plan
    engine = open_engine(plan, starter_gguf, name="starter")
    messages = [Message("user", "Tell me a long story about a lighthouse.")]
    kept = list(messages)
    seen = 0
    try:
        with pytest.raises(HelperGone) as err:
            for _chunk in engine.chat(messages, ChatOptions(max_tokens=2000, ignore_eos=True)):
                seen += 1
                if seen == 3:
                    killed = time.monotonic()
                    server.kill()
        assert time.monotonic() - killed < 5.0
        assert server.endpoint in err.value.message and "went away" in err.value.message
        assert "Ctrl+R" in err.value.hint
        assert messages == kept
    finally:
        engine.close()


def run_cli(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pocketchat", *argv], cwd=REPO, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def test_bench_shows_the_placement_and_both_speeds(server):
    import json

    out = run_cli("bench", "--model", "starter", "--rpc", server.endpoint, "--offline",
                  "-p", "32", "-n", "16", "-r", "1", "-t", "1", "--json")
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)["runs"]
    assert len(runs) == 2
    pooled, alone = runs
    assert pooled["rpc_servers"] == [server.endpoint] and alone["rpc_servers"] == []
    assert f"on {server.endpoint}" in pooled["placement_detail"]
    for r in runs:
        assert [x["test"] for x in r["results"]] == ["pp32", "tg16"]
        assert all(x["tok_s"] > 0 for x in r["results"])


def test_bench_ends_clearly_when_the_helper_is_killed(server):
    proc = subprocess.Popen(
        [sys.executable, "-m", "pocketchat", "bench", "--model", "starter", "--rpc", server.endpoint,
         "--offline", "-p", "32", "-n", "3000", "-r", "1", "-t", "1"],
        cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        worker = None
        while worker is None and time.monotonic() < deadline:  # wait for the pooled tg run
            for child in psutil.Process(proc.pid).children():
                with contextlib.suppress(psutil.Error):
                    cmd = " ".join(child.cmdline())
                    if "pocketchat-engine" in cmd and child.cpu_times().user > 3:  # process.BOOT
                        worker = child
            time.sleep(0.2)
        assert worker is not None, "the bench did not start"
        server.kill()
        killed = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - killed < 5.0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "Traceback" not in err
    assert f"error: the helper at {server.endpoint} went away" in err, err
    assert "run without --rpc" in err


def test_the_chat_keeps_the_conversation_and_reloads_without_the_helper(server):
    from support.uitools import answered, ready, run, screen_text, send, wait_for
    from pocketchat.commands.chat import Session
    from pocketchat.ui.app import create_app
    from pocketchat.ui.widgets import Notice

    session = Session(args_for("--rpc", server.endpoint))

    async def scenario():
        app = create_app(session.open_engine, prepare=session.prepare, thinking=False,
                         options=ChatOptions(max_tokens=1500, temperature=0.0, seed=1, ignore_eos=True))
        async with app.run_test(size=(130, 32)) as pilot:
            await ready(pilot, timeout=120)
            assert f"on {server.endpoint}" in screen_text(app)
            await send(pilot, "Tell me a long story about a dragon.")
            await wait_for(pilot, lambda: len(app.conversation.messages[-1].content) > 20, 60,
                           "the story to start")
            server.kill()
            killed = time.monotonic()
            await answered(pilot, timeout=15)
            elapsed = time.monotonic() - killed
            notices = " ".join(" ".join(str(n.render()).split()) for n in app.query(Notice))
            assert elapsed < 5.0, (elapsed, notices)
            assert f"the helper at {server.endpoint} went away" in notices, notices
            assert "Ctrl+R reloads the model" in notices
            story = app.conversation.messages[-1]
            assert story.role == "assistant" and len(story.content) > 20  # kept
            assert app.is_running
            await pilot.press("ctrl+r")
            await ready(pilot, timeout=120)
            assert session.alone and app.engine is not None
            assert "on 127.0.0.1" not in app.engine.info.placement
            app.base_options = GREEDY
            await send(pilot, "Name three colours.")
            await answered(pilot, timeout=60)
            assert app.conversation.messages[-1].content.strip()

    run(scenario())


def test_probe_reports_rpc_and_rpc_fails_at_once_without_it(monkeypatch, capsys):
    assert cli.main(["--probe"]) == 0
    assert "RPC backend (pool machines with --rpc): yes" in capsys.readouterr().out
    monkeypatch.setattr(ggml, "rpc_library", lambda: None)
    assert cli.main(["bench", "--model", "starter", "--rpc", "127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert "built without the RPC backend" in err
    assert ('CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir '
            "llama-cpp-python==0.3.36") in err
    with pytest.raises(RpcUnavailable):
        ggml.require_rpc()


def test_an_unreachable_helper_is_one_clear_error(capsys):
    port = free_port()
    assert cli.main(["--recommend", "--rpc", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach the helper at 127.0.0.1:{port}: nothing listens there" in err
    assert "pocketchat rpc-server" in err
    with pytest.raises(HelperUnreachable):
        wire.probe_helper(f"127.0.0.1:{port}")


def test_recommend_rpc_says_what_pooling_buys(server, capsys):
    from support import PROFILES

    assert cli.main(["--recommend", "--rpc", server.endpoint,
                     "--hardware", str(PROFILES / "linux-16gb.json")]) == 0
    out = capsys.readouterr().out
    assert f"{server.endpoint}: " in out and "round trip" in out and "MB/s" in out
    assert "Alone:  POCKET-35B-IQ1_M" in out and "Pooled: POCKET-35B-Q4_K_M" in out
    assert "Recommended: pool." in out


def test_the_server_refuses_a_non_loopback_address_without_the_flag():
    out = run_cli("rpc-server", "--host", "0.0.0.0", "--port", str(free_port()), timeout=60)
    assert out.returncode == 1
    assert "refusing to listen on 0.0.0.0" in out.stderr and "no authentication" in out.stderr
    assert "--allow-remote" in out.stderr and "Traceback" not in out.stderr
