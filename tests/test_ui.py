"""The chat app driven through Textual's Pilot with a scripted engine."""

from __future__ import annotations

import re
import threading

import pytest

from textual import events

from support.scripted_engine import Factory, Reply, ScriptedEngine
from support.uitools import SIZE, answered, make, ready, run, screen_text, send, status_text, wait_for
from pocketchat import conversations
from pocketchat.errors import CorruptModel, DownloadError, ModelNotFound
from pocketchat.engines.types import ChatOptions
from pocketchat.ui.screens import DownloadScreen
from pocketchat.ui.widgets import AnswerView, PromptInput, UserMessage

TOK_S = re.compile(r"(\d+(?:\.\d+)?) tok/s")


def test_a_prompt_streams_the_answer_with_a_live_tok_s_figure():
    async def scenario():
        reply = Reply("The answer **streams** in small pieces until it is all here.", hold_after=3)
        app, engine, _ = make(reply)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert "Scripted-1B · llama.cpp · CPU, 2 threads" in screen_text(app)
            await send(pilot, "Tell me something")
            await wait_for(pilot, engine.held.is_set, what="the engine to hold mid-answer")
            await wait_for(pilot, lambda: "The answer" in screen_text(app), what="partial text")
            mid = screen_text(app)
            assert "until it is all here" not in mid  # only part of it so far
            speed = TOK_S.search(status_text(app))
            assert speed and float(speed.group(1)) > 0, status_text(app)
            assert "3 tokens" in status_text(app) and "TTFT 125 ms" in status_text(app)
            assert "Answering" in status_text(app)
            engine.release.set()
            await answered(pilot)
            text = screen_text(app)
            assert "The answer streams in small pieces until it is all here." in text
            assert "11 tokens · 40.0 tok/s" in text  # the figures under the answer
            assert "40.0 tok/s" in status_text(app) and "mem 250 MB" in status_text(app)
            assert "ctx " in status_text(app)
            assert engine.calls[0][0][-1].content == "Tell me something"

    run(scenario())


def test_escape_stops_mid_answer_and_the_partial_answer_is_saved_interrupted():
    async def scenario():
        app, engine, _ = make(Reply("one two three four five six seven", hold_after=3))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "count")
            await wait_for(pilot, engine.held.is_set)
            await pilot.press("escape")
            await answered(pilot)
            assert app.is_running and engine.cancels == 1
            assert "interrupted" in screen_text(app)
            saved = conversations.load(app.conversation.id)
            answer = saved.messages[-1]
            assert answer.interrupted and answer.content == "one two three"
            # the app goes on: the next prompt is answered
            engine.replies = [Reply("Still here.")]
            await send(pilot, "are you there?")
            await answered(pilot)
            assert "Still here." in screen_text(app)
            assert not conversations.load(app.conversation.id).messages[-1].interrupted

    run(scenario())


def test_ctrl_n_starts_a_new_chat_and_keeps_the_old_one_on_disk():
    async def scenario():
        app, engine, _ = make(Reply("First answer."))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "first question")
            await answered(pilot)
            old_id = app.conversation.id
            await pilot.press("ctrl+n")
            await pilot.pause()
            assert not app.query(UserMessage) and not app.query(AnswerView)
            assert "First answer." not in screen_text(app)
            assert app.conversation.id != old_id and not app.conversation.messages
            assert conversations.load(old_id).messages[-1].content == "First answer."
            await send(pilot, "second question")
            await answered(pilot)
            assert [m.content for m in engine.calls[-1][0]] == ["second question"]

    run(scenario())


def test_the_conversation_file_reloads_and_the_model_sees_the_history():
    async def first():
        app, _, _ = make(Reply("Paris."))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "Capital of France?")
            await answered(pilot)
        return app.conversation.id

    async def second(conversation_id):
        last = conversations.last()
        assert last.id == conversation_id
        app, engine, _ = make(Reply("About 2 million."), conversation=last)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            text = screen_text(app)
            assert "Capital of France?" in text and "Paris." in text
            await pilot.press("up")  # recalls the previous prompt, even from the saved chat
            assert app.query_one(PromptInput).text == "Capital of France?"
            await send(pilot, "How many people live there?")
            await answered(pilot)
            sent = [(m.role, m.content) for m in engine.calls[0][0]]
            assert sent == [("user", "Capital of France?"), ("assistant", "Paris."),
                            ("user", "How many people live there?")]
        assert len(conversations.load(conversation_id).messages) == 4

    holder = {}

    async def both():
        holder["id"] = await first()
        await second(holder["id"])

    run(both())


def test_an_engine_crash_shows_a_message_and_restart_brings_it_back():
    async def scenario():
        crashing = ScriptedEngine([Reply("partial words then boom", crash_after=2)])
        healthy = ScriptedEngine([Reply("Back again.")])
        factory = Factory(crashing, healthy)
        app, _, _ = make(factory=factory)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "hello")
            await answered(pilot)
            await wait_for(pilot, lambda: "engine stopped" in screen_text(app), what="a notice")
            text = screen_text(app)
            assert "The engine stopped: the worker process died (signal 9)" in text
            assert "Ctrl+R restarts the engine" in text
            assert "Traceback" not in text and app.engine is None
            saved = conversations.load(app.conversation.id).messages[-1]
            assert saved.interrupted and saved.content == "partial words"
            await pilot.press("ctrl+r")
            await ready(pilot)
            assert len(factory.started) == 2
            await send(pilot, "again")
            await answered(pilot)
            assert "Back again." in screen_text(app)

    run(scenario())


def test_multiline_input_enter_sends_ctrl_j_breaks_the_line_up_recalls():
    async def scenario():
        app, engine, _ = make(Reply("ok"))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press(*"line", "ctrl+j", *"two")
            assert app.query_one(PromptInput).text == "line\ntwo"
            await pilot.press("enter")
            await answered(pilot)
            assert engine.calls[0][0][-1].content == "line\ntwo"
            assert app.query_one(PromptInput).text == ""
            await pilot.press("up")
            assert app.query_one(PromptInput).text == "line\ntwo"
            await pilot.press("down")
            assert app.query_one(PromptInput).text == ""
            # a burst of keys (as a terminal delivers fast typing) keeps its order
            for key, char in [("a", "a"), ("ctrl+j", "\n"), ("b", "b")]:
                app.post_message(events.Key(key, char))
            await pilot.pause(0.1)
            assert app.query_one(PromptInput).text == "a\nb"

    run(scenario())


def test_an_answer_cut_at_the_set_number_of_tokens_does_not_say_the_context_is_full():
    async def scenario():  # `pocketchat --bench-tokens 4`: every answer stops at 4 tokens
        app, _, _ = make(Reply("one two three four", finish_reason="length"),
                         options=ChatOptions(max_tokens=4, ignore_eos=True))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "count")
            await answered(pilot)
            text = screen_text(app)
            assert "one two three four" in text and "4 tokens" in text
            assert "context is full" not in text

    run(scenario())


def test_a_full_context_and_an_error_answer_are_messages_not_crashes():
    async def scenario():
        app, engine, _ = make(
            Reply("cut", finish_reason="length", context_used=4096, dropped_messages=2),
            Reply("", finish_reason="error", error="prompt too long"),
        )
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "long")
            await answered(pilot)
            text = screen_text(app)
            assert "The context is full (4096/4096 tokens)" in text and "Ctrl+N" in text
            assert "2 earlier messages no longer fit" in text
            assert app.query_one("#status").has_class("-ctx-full")  # the meter turns red
            await send(pilot, "again")
            await answered(pilot)
            assert "The model could not answer: prompt too long" in screen_text(app)
            assert app.is_running and app.engine is engine

    run(scenario())


def test_start_up_failures_show_a_message_and_ctrl_r_retries():
    async def scenario():
        factory = Factory(ScriptedEngine(),
                          fail=[CorruptModel("the model file is truncated")])
        app, _, _ = make(factory=factory)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "Could not start" in screen_text(app), what="a notice")
            text = screen_text(app)
            assert "Could not start the model: the model file is truncated" in text
            assert "pocketchat models rm" in text  # the error's own hint
            await pilot.press("ctrl+r")
            await ready(pilot)

    run(scenario())


def test_an_impossible_request_ends_the_app_with_the_error():
    async def scenario():
        factory = Factory(fail=[ModelNotFound("no build called nope")])
        app, _, _ = make(factory=factory)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: not app.is_running, what="the app to exit")
        assert app.return_code == 1 and isinstance(app.fatal_error, ModelNotFound)

    run(scenario())


def test_download_screen_shows_bytes_percent_speed_and_eta_then_loads():
    async def scenario():
        go = threading.Event()
        seen = {}

        def prepare(hooks):
            import time

            total = 2_000_000_000
            for i in range(1, 6):
                hooks.progress(i * 100_000_000, total, "Downloading POCKET-Q4")
                time.sleep(0.12)
            go.wait(10)
            hooks.progress(total, total)

        app, _, _ = make(prepare=prepare)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, DownloadScreen))
            await wait_for(pilot, lambda: "left" in screen_text(app), what="an ETA")
            seen["text"] = screen_text(app)
            go.set()
            await ready(pilot)
        text = seen["text"]
        assert "Downloading POCKET-Q4" in text
        assert re.search(r"[\d.]+ GB of 2\.0 GB · \d+% · [\d.]+ MB/s · .+ left", text), text

    run(scenario())


def test_a_failed_download_is_a_message_with_a_way_on():
    async def scenario():
        attempts = []

        def prepare(hooks):
            attempts.append(1)
            if len(attempts) == 1:
                raise DownloadError("the connection dropped at 41%")

        app, _, _ = make(prepare=prepare)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "dropped" in screen_text(app), what="a notice")
            text = screen_text(app)
            assert "the connection dropped at 41%" in text and "resumes" in text
            await pilot.press("ctrl+r")
            await ready(pilot)
            assert len(attempts) == 2

    run(scenario())


def test_prepare_can_ask_a_question_on_screen():
    async def scenario():
        answers = []
        app, _, _ = make(prepare=lambda hooks: answers.append(hooks.confirm("Use the starter?")))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "Use the starter?" in screen_text(app))
            await pilot.press("y")
            await ready(pilot)
        assert answers == [True]

    run(scenario())


@pytest.mark.perf
def test_screen_updates_are_bounded_while_tokens_pour_in(monkeypatch):
    async def scenario():
        calls = []
        original = AnswerView.add_text

        async def counting(self, fragment):
            calls.append(len(fragment))
            await original(self, fragment)

        monkeypatch.setattr(AnswerView, "add_text", counting)
        words = " ".join(f"w{i}" for i in range(3000))
        app, engine, _ = make(Reply(words), delay=0.0003)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            import time

            started = time.monotonic()
            await send(pilot, "flood")
            await answered(pilot, timeout=30)
            elapsed = time.monotonic() - started
        assert app.conversation.messages[-1].content == words
        assert len(calls) <= elapsed * 20 + 3, (len(calls), elapsed)
        assert len(calls) < 3000 / 10  # tokens were batched, many to an update

    run(scenario())


def test_ctrl_q_during_an_answer_quits_cleanly_and_closes_the_engine():
    async def scenario():
        app, engine, _ = make(Reply("a b c d e f", hold_after=2))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "hi")
            await wait_for(pilot, engine.held.is_set)
            await pilot.press("ctrl+q")
            await wait_for(pilot, lambda: not app.is_running, what="the app to exit")
        assert app.return_code == 0 and engine.closed
        assert conversations.load(app.conversation.id).messages[-1].interrupted

    run(scenario())


def test_the_render_pace_backs_off_when_rendering_is_costly_and_returns_when_cheap():
    from pocketchat.ui.streaming import RenderPacer

    clock = {"t": 0.0, "cpu": 0.0}
    pacer = RenderPacer(max_rate=20, min_rate=4, budget=0.08, window=1.0,
                        clock=lambda: clock["t"], cpu=lambda: clock["cpu"])
    assert pacer.interval == 0.05

    def second(cpu_share: float) -> bool:
        clock["t"] += 1.0
        clock["cpu"] += cpu_share
        return pacer.sample()

    assert second(0.30) and pacer.interval == pytest.approx(0.075)  # 30% of a core: slow down
    for _ in range(10):
        second(0.30)
    assert pacer.interval == pytest.approx(0.25)  # never below 4 updates a second
    assert not second(0.06)  # within budget: keep the pace
    for _ in range(10):
        second(0.01)
    assert pacer.interval == pytest.approx(0.05)  # cheap again: back to 20 a second, never more
    clock["t"] += 0.5
    assert not pacer.sample()  # less than a window since the last look: no change

    # a short answer starts at the pace the last ones settled on; the idle time between
    # answers (no rendering) does not count as cheap rendering
    for _ in range(10):
        second(0.30)
    clock["t"] += 60.0  # the user reads and types
    pacer.restart()
    assert not second(0.06) and pacer.interval == pytest.approx(0.25)


@pytest.mark.slow
def test_after_a_signal_the_process_ends_even_if_the_app_cannot():
    """The guard started on SIGTERM/SIGHUP ends a process whose app hangs on a dead terminal,
    and stands down once the app ended by itself."""
    import subprocess
    import sys

    code = ("import threading, time; from pocketchat.ui.app import _exit_if_stuck; "
            "ended = threading.Event(); {setup}"
            "threading.Thread(target=_exit_if_stuck, args=(ended, 129, 0.5), daemon=True).start(); "
            "time.sleep(2); print('lived')")
    stuck = subprocess.run([sys.executable, "-c", code.format(setup="")], capture_output=True,
                           text=True, timeout=30)
    assert stuck.returncode == 129 and "lived" not in stuck.stdout
    ended = subprocess.run([sys.executable, "-c", code.format(setup="ended.set(); ")],
                           capture_output=True, text=True, timeout=30)
    assert ended.returncode == 0 and "lived" in ended.stdout
