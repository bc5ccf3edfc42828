"""Progress while a long prompt is read: the engines' progress chunks (real llama.cpp on the
starter, in process and through the worker), and the chat's status bar (the real app)."""

from __future__ import annotations

import re
import time

import pytest
from support.engine_makers import make_llama_in_process, make_llama_worker_at_chat_pace
from support.uitools import answered, ready, run, send, status_text, wait_for

from pocketchat.engines.types import ChatOptions, Message
from pocketchat.textsafe import one_line

pytestmark = pytest.mark.slow

PROGRESS = re.compile(r"Reading the prompt ([\d,]+)/([\d,]+) tokens")


def long_message(words: int, word: str = "item") -> str:
    return " ".join(f"{word}{i}" for i in range(words)) + "\nSay one word."


@pytest.mark.parametrize("maker", [make_llama_in_process, make_llama_worker_at_chat_pace],
                         ids=["in-process", "worker"])
def test_a_long_prompt_reports_progress_before_the_first_token(maker):
    pytest.importorskip("llama_cpp")
    engine = maker(2048)
    try:
        started = time.monotonic()
        seen, first_at, texts = [], None, []
        for chunk in engine.chat([Message("user", long_message(450))],
                                 ChatOptions(max_tokens=2, thinking=False, temperature=0)):
            if chunk.progress is not None:
                assert not "".join(texts), "progress after the answer began"
                seen.append(chunk.progress)
                first_at = first_at if first_at is not None else time.monotonic() - started
            texts.append(chunk.text)
        final = chunk.stats
        assert final.prompt_length > 1024  # three pieces of 512 at least
        assert seen and seen[0].done == 0 and first_at < 1.0, (seen[:1], first_at)
        assert [p.total for p in seen] == [final.prompt_length] * len(seen)
        dones = [p.done for p in seen]
        assert dones == sorted(dones) and dones[-1] == final.prompt_length - 1
        assert len(seen) >= 3 and seen[-1].tok_s > 0 and seen[-1].seconds_left is not None
        # a short follow-up reuses the cache: no progress for it
        again = list(engine.chat([Message("user", long_message(450)), Message("assistant", "x"),
                                  Message("user", "ok?")], ChatOptions(max_tokens=1, thinking=False)))
        assert all(c.progress is None for c in again)
    finally:
        engine.close()


@pytest.fixture
def starter_factory(starter_gguf):
    pytest.importorskip("llama_cpp")
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection
    from pocketchat.engines import open_engine
    from pocketchat.ui.streaming import CHUNK_INTERVAL

    choice = choose_model(Selection(model="starter", ctx=4096, offline=True, yes=True))
    return lambda: open_engine(choice.plan, choice.path, name=choice.name,
                               chunk_interval=CHUNK_INTERVAL)


def test_the_status_bar_shows_the_prompt_being_read_and_esc_stops_it(starter_factory):
    async def scenario():
        from pocketchat.ui.app import create_app

        app = create_app(starter_factory, thinking=False,
                         options=ChatOptions(max_tokens=8, temperature=0.0))
        async with app.run_test(size=(140, 30)) as pilot:
            await ready(pilot, timeout=90)
            await send(pilot, long_message(900))
            await wait_for(pilot, lambda: PROGRESS.search(status_text(app)), 5,
                           "the prompt's progress in the status bar")
            await wait_for(pilot, lambda: (m := PROGRESS.search(status_text(app)))
                           and m.group(1) != "0", 60, "a piece of the prompt read")
            line = status_text(app)
            done, total = (int(g.replace(",", "")) for g in PROGRESS.search(line).groups())
            assert 0 < done < total and total > 2500, line
            assert re.search(r"· \d+ tok/s · [\d.]+ (s|ms|min \d+ s) left", line), line
            assert one_line(line) == line  # plain text, no control sequences
            stopped_at = time.monotonic()
            await pilot.press("escape")
            assert status_text(app).startswith("Stopping")
            await answered(pilot, timeout=10)
            assert time.monotonic() - stopped_at < 5
            answer = app.conversation.messages[-1]
            assert answer.interrupted and answer.content == ""
            assert status_text(app).startswith("Stopped")

    run(scenario())


def _cli(args: list[str], stdin: str, stderr_is_terminal: bool, tmp_path) -> tuple[int, str, str]:
    """`python -m pocketchat ARGS` with `stdin` piped in and stderr a terminal (a pty) or a
    file; (exit code, stdout, what reached stderr)."""
    import os
    import subprocess
    import sys
    import threading
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    args = [sys.executable, "-m", "pocketchat", *args]
    env = {**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1"}
    if not stderr_is_terminal:
        log = tmp_path / "err.log"
        with open(log, "wb") as err:
            done = subprocess.run(args, input=stdin.encode(), stdout=subprocess.PIPE,
                                  stderr=err, timeout=300, env=env, cwd=repo)
        return done.returncode, done.stdout.decode(), log.read_text()
    master, slave = os.openpty()
    seen: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal's other end closed
                return
            if not data:
                return
            seen.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=slave,
                            env=env, cwd=repo)
    os.close(slave)
    out, _ = proc.communicate(stdin.encode(), timeout=300)
    reader.join(10)
    os.close(master)
    return proc.returncode, out.decode(), b"".join(seen).decode(errors="replace")


def _oneshot(stderr_is_terminal: bool, tmp_path) -> tuple[int, str, str]:
    """`pocketchat --model starter -p ...` with a long document piped in."""
    return _cli(["--model", "starter", "--ctx", "4096", "--no-think", "-p", "Say one word."],
                long_message(350), stderr_is_terminal, tmp_path)


def test_dash_p_shows_the_prompt_progress_on_a_terminal_stderr_only(tmp_path):
    pytest.importorskip("llama_cpp")
    code, out, err = _oneshot(True, tmp_path)
    assert code == 0 and out.strip(), err
    lines = [m for m in PROGRESS.finditer(err)]
    assert len(lines) >= 2, err  # 0 at once, then after pieces
    assert lines[0].group(1) == "0" and int(lines[-1].group(1).replace(",", "")) > 0
    assert "\n" not in err  # one line, rewritten in place with \r
    assert "tok/s" in err and "left" in err
    assert err.endswith("\r") and err.split("\r")[-2].strip() == ""  # wiped before the answer
    assert "Reading" not in out

    code, out, err = _oneshot(False, tmp_path)
    assert code == 0 and out.strip(), err
    assert "Reading the prompt" not in err and "\r" not in err and "Loading" not in err, err


def test_serve_streams_prompt_progress_before_the_first_token_only_when_asked(tmp_path):
    pytest.importorskip("llama_cpp")
    openai = pytest.importorskip("openai")
    from support.serverproc import running

    with running(["--model", "starter", "--ctx", "4096"], tmp_path) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0,
                               timeout=300)
        messages = [{"role": "user", "content": long_message(350)}]
        events = list(client.chat.completions.create(
            model="starter", messages=messages, max_tokens=2, stream=True,
            extra_body={"return_progress": True}))
        first_text = next(i for i, e in enumerate(events)
                          if e.choices and e.choices[0].delta.content)
        progress = [(i, e.model_extra["prompt_progress"]) for i, e in enumerate(events)
                    if (e.model_extra or {}).get("prompt_progress")]
        assert len(progress) >= 3 and progress[-1][0] < first_text
        total = progress[0][1]["total"]
        assert total > 1024
        assert set(progress[0][1]) == {"total", "cache", "processed", "time_ms"}
        processed = [p["processed"] for _, p in progress]
        assert processed[0] == progress[0][1]["cache"] and processed == sorted(processed)
        assert processed[-1] < total and all(p["total"] == total for _, p in progress)
        assert progress[-1][1]["time_ms"] > 0
        assert events[progress[0][0]].choices[0].delta.role == "assistant"

        # the same prompt again without the option: no progress field anywhere (a new
        # message, so the prompt is read again rather than taken from the cache)
        messages = [{"role": "user", "content": long_message(350, "entry")}]
        plain = list(client.chat.completions.create(model="starter", messages=messages,
                                                    max_tokens=2, stream=True))
        assert not any((e.model_extra or {}).get("prompt_progress") for e in plain)
        assert plain[0].choices[0].delta.role == "assistant"
        assert "".join(e.choices[0].delta.content or "" for e in plain if e.choices)
        assert plain[-1].model_extra["timings"]["prompt_n"] > 1024  # it was read again


def test_bench_shows_each_prompt_being_read_on_a_terminal(tmp_path):
    pytest.importorskip("llama_cpp")
    code, out, err = _cli(["bench", "--model", "starter", "-p", "1100", "-n", "2", "-r", "1"],
                          "", True, tmp_path)
    assert code == 0 and "pp1100" in out, err
    assert PROGRESS.search(err) and "tok/s" in err and "left" in err, err
    assert not PROGRESS.search(out)


def test_loading_reports_llama_cpps_fraction_and_the_loading_screen_shows_it(starter_gguf):
    pytest.importorskip("llama_cpp")
    import threading

    from support.scripted_engine import ScriptedEngine
    from support.uitools import SIZE
    from pocketchat.engines.worker.parent import WorkerEngine
    from support.engine_makers import llama_plan
    from pocketchat.ui.app import create_app
    from pocketchat.ui.screens import LoadingScreen

    seen: list[tuple[str, float]] = []
    WorkerEngine(llama_plan(1024), starter_gguf, on_progress=lambda *p: seen.append(p)).close()
    loading = [f for stage, f in seen if stage == "loading"]
    assert loading and loading == sorted(loading) and loading[-1] == 1.0, seen
    assert seen[-1] == ("ready", 1.0)

    go = threading.Event()

    def factory(on_progress):
        for stage, fraction in seen:  # what the real load reported, then held at 42%
            if stage == "loading" and fraction < 0.42:
                on_progress(stage, fraction)
        on_progress("loading", 0.42)
        go.wait(20)
        return ScriptedEngine()

    async def scenario():
        app = create_app(factory, memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, LoadingScreen)
                           and app.screen.fraction == 0.42, what="the load's fraction")
            await pilot.pause()
            shown = str(app.screen.query_one("#loading-elapsed").render())
            assert shown.startswith("42% ") and "Ctrl+Q quits" in shown, shown
            go.set()
            await ready(pilot)

    run(scenario())


def test_the_status_bar_says_a_saved_state_is_being_restored(tiny_qwen35):
    import threading

    from support.uitools import answered
    from pocketchat import conversations
    from pocketchat.engines import open_engine
    from pocketchat.types import LoadPlan
    from pocketchat.ui.app import create_app

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                    n_threads=1, n_threads_batch=1)
    options = ChatOptions(temperature=0.0, max_tokens=4)

    async def first():
        app = create_app(lambda: open_engine(plan, tiny_qwen35, name="tiny"), thinking=False,
                         options=options)
        async with app.run_test(size=(120, 30)) as pilot:
            await ready(pilot, timeout=60)
            await send(pilot, "Tell me about the number 17.")
            await answered(pilot, timeout=60)
        return app.conversation

    held: list = []

    async def keep():
        held.append(await first())

    run(keep())
    conversation = conversations.load(held[0].id)
    assert conversation.state_path.exists()
    gate = threading.Event()

    class Gated:  # the real engine; its state load waits until the test has looked
        def __init__(self) -> None:
            self.inner = open_engine(plan, tiny_qwen35, name="tiny")
            self.info = self.inner.info

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def chat(self, *a, **k):
            return self.inner.chat(*a, **k)

        def cancel(self):
            self.inner.cancel()

        def close(self):
            self.inner.close()

        def save_state(self, path):
            return self.inner.save_state(path)

        def load_state(self, path):
            gate.wait(30)
            return self.inner.load_state(path)

    async def second():
        app = create_app(Gated, conversation=conversation, thinking=False, options=options)
        async with app.run_test(size=(120, 30)) as pilot:
            await ready(pilot, timeout=60)
            await wait_for(pilot, lambda: status_text(app).startswith(
                "Restoring the chat's saved model state ("), 10, "the restore in the status bar")
            gate.set()
            await wait_for(pilot, lambda: status_text(app).startswith("Ready"), 30,
                           "the restore's end")

    run(second())


def test_the_chat_in_a_terminal_shows_a_4000_token_prompt_being_read_within_a_second(tmp_path):
    """The real CLI in tmux on the starter: a pasted 4,000-token message, then Enter: the
    progress is on the screen within a second, moves on, and Esc stops it."""
    from support import terminal

    text_file = tmp_path / "long.txt"
    text_file.write_text(long_message(1030))
    with terminal.starter_chat(tmp_path, "--ctx 8192", size=(160, 34)) as (tmux, exit_file):
        tmux("load-buffer", "-b", "long", str(text_file))
        tmux("paste-buffer", "-p", "-b", "long", "-t", "e2e")  # bracketed, as a terminal pastes
        tmux.wait_for(lambda s: "Say one word." in s, 30, "the paste")
        tmux("send-keys", "-t", "e2e", "Enter")
        sent = time.monotonic()
        screen = tmux.wait_for(lambda s: PROGRESS.search(s), 5, "the prompt's progress")
        shown_after = time.monotonic() - sent
        done, total = (int(g.replace(",", "")) for g in PROGRESS.search(screen).groups())
        print(f"progress on screen {shown_after:.2f} s after Enter: {PROGRESS.search(screen).group(0)}")
        assert shown_after < 1.0, (shown_after, screen)
        assert total >= 3900, screen
        screen = tmux.wait_for(lambda s: (m := PROGRESS.search(s)) and m.group(1) != "0", 90,
                               "a piece of the prompt read")
        line = next(ln for ln in screen.splitlines() if PROGRESS.search(ln))
        assert re.search(r"· \d+ tok/s · .+ left", line), line
        tmux("send-keys", "-t", "e2e", "Escape")
        tmux.wait_for(lambda s: "Stopped" in s and not PROGRESS.search(s), 10, "Esc to stop it")
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()


def test_pieces_keep_the_checkpoint_of_a_recurrent_model(tiny_qwen35):
    """POCKET's architecture (recurrent layers: a state cut back only to a checkpoint): a long
    prompt read piece by piece still leaves the checkpoint at the end of the last user message,
    so the next turn reuses the whole conversation before it; greedy answers equal those of an
    engine that read the prompt in one go (a piece larger than the prompt)."""
    from dataclasses import replace

    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=4096,
                    n_threads=2, n_threads_batch=2, n_batch=128)
    opts = ChatOptions(max_tokens=6, thinking=False, temperature=0.0)
    first = [Message("user", long_message(150))]
    answers = {}
    for name, p in (("pieces", plan), ("whole", replace(plan, n_batch=4096))):
        engine = LlamaCppEngine(p, tiny_qwen35, name="tiny")
        try:
            chunks = list(engine.chat(first, opts))
            progress = [c.progress for c in chunks if c.progress is not None]
            assert bool(progress) == (name == "pieces")
            answer = "".join(c.text for c in chunks)
            length = chunks[-1].stats.prompt_length
            mark = len(engine.cache.checkpoint_tokens)  # the end of the user message
            assert length - 32 < mark < length and mark % 128 != 0, (mark, length)
            second = [*first, Message("assistant", answer), Message("user", "And then?")]
            again = list(engine.chat(second, opts))
            s = again[-1].stats
            assert s.reused_tokens >= chunks[-1].stats.prompt_length - 1, s
            assert all(c.progress is None for c in again)  # only the new turn is read
            answers[name] = (answer, "".join(c.text for c in again))
        finally:
            engine.close()
    assert answers["pieces"] == answers["whole"]


def test_pieces_park_a_long_system_message_for_other_chats(tiny_qwen35):
    """The prompt cache's shared prefix (a long first system message) is parked at its exact
    end when the prompt is read in pieces, and a second chat with it reads only the rest."""
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=4096,
                    n_threads=2, n_threads_batch=2, n_batch=128, prompt_cache_bytes=1 << 30)
    opts = ChatOptions(max_tokens=3, thinking=False, temperature=0.0)
    system = Message("system", long_message(120, "rule"))
    engine = LlamaCppEngine(plan, tiny_qwen35, name="tiny")
    try:
        first = list(engine.chat([system, Message("user", "First chat.")], opts))
        assert any(c.progress is not None for c in first)
        shared = [e for e in engine.prompt_cache._entries.values() if e.shared]
        assert len(shared) == 1 and len(shared[0].tokens) % 128 != 0, shared
        second = list(engine.chat([system, Message("user", "Another chat, other words.")], opts))
        assert second[-1].stats.reused_tokens >= len(shared[0].tokens), second[-1].stats
    finally:
        engine.close()
