"""Issue 15 in the chat app (Textual's Pilot): text typed while the model loads is kept."""

from __future__ import annotations

import threading

from scripted_engine import ScriptedEngine
from uitools import SIZE, ready, run, wait_for

from pocketchat.ui.app import create_app
from pocketchat.ui.screens import LoadingScreen
from pocketchat.ui.widgets import PromptInput


def test_text_typed_while_the_model_loads_is_kept_at_start_and_after_restart():
    go = threading.Event()

    def factory():
        go.wait(10)
        return ScriptedEngine()

    async def scenario():
        app = create_app(factory, memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, LoadingScreen), what="the loading screen")
            await pilot.press(*"hello", "backspace", "o", "space", "w")
            go.set()
            await ready(pilot)
            prompt = app.query_one(PromptInput)
            assert prompt.text == "hello w"
            go.clear()
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: isinstance(app.screen, LoadingScreen), what="the restart")
            await pilot.press(*"orld")
            go.set()
            await ready(pilot)
            assert app.query_one(PromptInput).text == "hello world"
            assert app.query_one(PromptInput).has_focus

    run(scenario())
