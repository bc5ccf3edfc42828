"""The newcomer's findings in the chat app (Textual's Pilot): Ctrl+N starts clean and
at the top, Ctrl+C stops an answer, the memory figure follows a restart, the keys panel closes
with Esc, the hardware page shows a recommendation and every CPU flag, a chat is "interrupted"
only by its last answer, a worker killed while idle is reported at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.scripted_engine import Factory, Reply, ScriptedEngine
from support.uitools import SIZE, answered, make, ready, run, screen_text, send, status_text, wait_for
from pocketchat import cli
from pocketchat.conversations import Conversation
from pocketchat.ui.app import create_app
from pocketchat.ui.screens import InfoScreen, SystemPromptScreen
from pocketchat.ui.widgets import Welcome
from textual.containers import VerticalScroll

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

PROFILES = Path(__file__).parent / "profiles"


def test_a_system_prompt_set_in_one_chat_does_not_follow_into_the_next():
    async def scenario():
        app, _engine, _factory = make(system="From the command line.")
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            app.chat.edit_system_prompt()
            await wait_for(pilot, lambda: isinstance(app.screen, SystemPromptScreen)
                           and app.screen.query("#system-text"), what="the dialog")
            area = app.screen.query_one("#system-text")
            area.load_text("Answer like a pirate.")
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: not isinstance(app.screen, SystemPromptScreen), what="saved")
            assert app.conversation.system == "Answer like a pirate."
            await pilot.press("ctrl+n")
            await pilot.pause()
            assert app.conversation.system == "From the command line."

    run(scenario())


def test_ctrl_n_shows_the_welcome_at_the_top_as_at_start():
    async def scenario():
        app, _engine, _factory = make(Reply("A short answer."))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            at_start = app.query_one(Welcome).region.y
            await send(pilot, "hello")
            await answered(pilot)
            await pilot.press("ctrl+n")
            await wait_for(pilot, lambda: app.query(Welcome), what="the welcome")
            await pilot.pause()
            assert app.query_one(Welcome).region.y == at_start

    run(scenario())


def test_ctrl_c_stops_the_answer_and_a_second_ctrl_c_quits():
    async def scenario():
        app, engine, _factory = make(Reply("one two three four five six seven", hold_after=3))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "count")
            await wait_for(pilot, engine.held.is_set, what="the answer under way")
            await pilot.press("ctrl+c")
            await answered(pilot)
            assert app.is_running and engine.cancels == 1
            assert app.conversation.messages[-1].interrupted
            assert "one two three" in app.conversation.messages[-1].content
            await pilot.press("ctrl+c")
            await wait_for(pilot, lambda: not app.is_running, what="the app to quit")
        assert app.return_code == 0

    run(scenario())


def test_one_ctrl_c_on_an_idle_chat_does_not_quit_and_copies_a_selection():
    async def scenario():
        app, _engine, _factory = make()
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            prompt = app.query_one("#prompt")
            prompt.load_text("copy me")
            prompt.select_all()
            await pilot.press("ctrl+c")  # copies, as in any text field
            assert app.clipboard == "copy me" and app.is_running
            prompt.load_text("")
            await pilot.press("ctrl+c")
            await pilot.pause()
            assert app.is_running  # one Ctrl+C on an idle chat only says how to quit

    run(scenario())


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def test_the_memory_figure_follows_the_engine_after_a_restart():
    first, second = _sleeper(), _sleeper()
    try:
        factory = Factory(ScriptedEngine(pid=first.pid), ScriptedEngine(pid=second.pid))

        async def scenario():
            app = create_app(factory)  # the app's own memory probe, on the worker's pid
            async with app.run_test(size=SIZE) as pilot:
                await ready(pilot)
                await wait_for(pilot, lambda: "mem ?" not in status_text(app), what="a memory figure")
                await pilot.press("ctrl+r")
                await wait_for(pilot, lambda: len(factory.started) == 2 and app.engine is not None,
                               what="the restart")
                first.kill()  # the old worker is gone, as after a real restart
                first.wait()
                app._sample_memory()
                await pilot.pause()
                assert "mem ?" not in status_text(app) and "mem " in status_text(app), status_text(app)

        run(scenario())
    finally:
        for p in (first, second):
            p.kill()
            p.wait()


def test_the_keys_panel_closes_with_esc():
    async def scenario():
        app, _engine, _factory = make()
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            app.action_show_help_panel()
            await wait_for(pilot, lambda: app.screen.query("HelpPanel"), what="the keys panel")
            await pilot.press("escape")
            await wait_for(pilot, lambda: not app.screen.query("HelpPanel"), what="the panel to close")

    run(scenario())


def test_the_hardware_page_shows_a_recommendation_and_every_cpu_flag(tmp_path):
    from pocketchat.commands.chat import describe_setup
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection

    profile = json.loads((PROFILES / "linux-32gb.json").read_text())
    profile["cpu_flags"] = [f"flag{i:02d}_extension" for i in range(40)] + ["zz_last_flag"]
    path = tmp_path / "many-flags.json"
    path.write_text(json.dumps(profile))
    sel = Selection.from_args(cli._root_parser().parse_args(["--model", "starter", "--hardware", str(path)]))
    about = describe_setup(sel, choose_model(sel))
    assert "Recommended:" in about and "build " in about, about
    assert all(len(line) <= 78 for line in about.split("```text")[1].splitlines()[:6])

    async def scenario():
        app, _engine, _factory = make(about=about)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            app.action_about()
            await wait_for(pilot, lambda: isinstance(app.screen, InfoScreen), what="the page")
            await pilot.pause()
            page = app.screen.query_one(VerticalScroll)
            seen = ""
            for y in range(0, 60, 4):  # read the page down as a user scrolls it
                page.scroll_to(y=y, animate=False, immediate=True)
                await pilot.pause()
                seen += screen_text(app)
            assert all(f"flag{i:02d}_extension" in seen for i in range(40)) and "zz_last_flag" in seen

    run(scenario())


def test_a_chat_is_interrupted_only_when_its_last_answer_was(capsys):
    from pocketchat.ui.screens import conversation_line

    earlier = Conversation()
    earlier.add("user", "one")
    earlier.add("assistant", "cut", interrupted=True)
    earlier.add("user", "two")
    earlier.add("assistant", "whole answer")
    earlier.save()
    assert "(interrupted)" not in conversation_line(earlier)
    last = Conversation()
    last.add("user", "three")
    last.add("assistant", "", interrupted=True)  # killed before its first token
    last.save()
    assert conversation_line(last).endswith("(interrupted)")
    assert cli.main(["history", "--json"]) == 0
    marks = {c["id"]: c["interrupted"] for c in json.loads(capsys.readouterr().out)}
    assert marks == {earlier.id: False, last.id: True}


@pytest.mark.slow
def test_a_worker_killed_while_the_chat_is_idle_is_reported_at_once(starter_gguf):
    from support.engine_makers import llama_plan
    from pocketchat.engines.worker.parent import WorkerEngine

    async def scenario():
        app = create_app(lambda: WorkerEngine(llama_plan(512), starter_gguf))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot, timeout=120)
            os.kill(app.engine.pid, signal.SIGKILL)
            await wait_for(pilot, lambda: "The engine stopped while the chat was idle" in screen_text(app),
                           timeout=15, what="the notice, without sending anything")
            assert app.engine is None and "Ctrl+R restarts the engine" in screen_text(app)
            assert "No model" in status_text(app)

    run(scenario())


def test_after_a_ctrl_c_stop_a_new_answer_is_stopped_again_not_quit():
    async def scenario():
        app, engine, _factory = make(Reply("one two three four five", hold_after=2))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            for n in (1, 2):
                engine.held.clear()
                await send(pilot, f"question {n}")
                await wait_for(pilot, engine.held.is_set, what="the answer under way")
                await pilot.press("ctrl+c")
                await answered(pilot)
                assert app.is_running and engine.cancels == n

    run(scenario())
