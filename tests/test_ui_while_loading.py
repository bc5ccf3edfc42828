"""In the chat app (Textual's Pilot): text typed while the model loads is kept."""

from __future__ import annotations

import threading

from support.scripted_engine import ScriptedEngine
from support.uitools import SIZE, ready, run, screen_text, wait_for
from pocketchat.ui.app import create_app
from pocketchat.ui.screens import LoadingScreen
from pocketchat.ui.widgets import PromptInput
import pytest

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane


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


def _commands(app) -> dict[str, object]:
    """The palette's commands by name (our provider and Textual's system commands)."""
    from pocketchat.ui.palette import ChatCommands

    provider = ChatCommands(app.screen)
    names = {name: callback for name, _help, callback in provider._commands()}
    names.update({c.title: c.callback for c in app.get_system_commands(app.screen)})
    return names


def test_thinking_on_off_is_offered_only_for_a_model_that_thinks():
    from support.scripted_engine import Factory
    from pocketchat.engines.types import EngineInfo

    for thinks, offered in ((False, False), (True, True), (None, True)):
        engine = ScriptedEngine(info=EngineInfo(backend="llama.cpp", model="M", placement="CPU, 2 threads",
                                                n_ctx=4096, thinking=thinks))

        async def scenario(engine=engine, offered=offered):
            app = create_app(Factory(engine), memory_probe=lambda: 1)
            async with app.run_test(size=SIZE) as pilot:
                await ready(pilot)
                assert ("Thinking off" in _commands(app)) is offered

        run(scenario())


def test_a_reopened_chat_shows_the_context_it_filled():
    from support.scripted_engine import Factory
    from support.uitools import status_text
    from pocketchat.conversations import Conversation

    saved = Conversation()
    saved.add("user", "hello")
    saved.add("assistant", "hi", stats={"generated_tokens": 2, "context_used": 1234, "context_limit": 4096})
    saved.save()

    async def scenario():
        app = create_app(Factory(ScriptedEngine()), conversation=saved, memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert "ctx 1234/4096" in status_text(app)
            await app.chat.new_chat()
            await app.chat.open_conversation(saved)
            await pilot.pause()
            assert "ctx 1234/4096" in status_text(app)

    run(scenario())


def test_ctrl_r_mid_answer_stops_it_says_so_and_restarts():
    from support.scripted_engine import Factory, Reply
    from support.uitools import answered, send
    from pocketchat import conversations

    first = ScriptedEngine([Reply("one two three four five six", hold_after=2)])
    second = ScriptedEngine()

    async def scenario():
        app = create_app(Factory(first, second), memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "count")
            await wait_for(pilot, first.held.is_set, what="the answer to hold")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.engine is second, what="the restarted engine")
            await answered(pilot)
            notes = [str(n.message) for n in app._notifications]
            assert any("Stopping the answer" in n for n in notes), notes
            assert first.closed and first.cancels == 1
            saved = conversations.load(app.conversation.id)
            assert saved.messages[-1].interrupted and saved.messages[-1].content.startswith("one")

    run(scenario())


def test_the_palettes_screenshot_is_saved_and_says_where():
    from support.scripted_engine import Factory
    from pocketchat.paths import settings

    async def scenario():
        app = create_app(Factory(ScriptedEngine()), memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            _commands(app)["Screenshot"]()
            await wait_for(pilot, lambda: list(settings().screenshots_dir.glob("*.svg")), what="the file")
            await pilot.pause(0.1)
            notes = [str(n.message) for n in app._notifications]
            assert any("Screenshot saved: " + str(settings().screenshots_dir) in n for n in notes), notes

    run(scenario())


def test_ctrl_t_on_a_model_that_does_not_think_says_so():
    """The key bar hides "Answer" for it; the key still answers, with why."""
    from support.scripted_engine import Factory
    from pocketchat.engines.types import EngineInfo

    engine = ScriptedEngine(info=EngineInfo(backend="llama.cpp", model="M", placement="CPU, 2 threads",
                                            n_ctx=4096, thinking=False))

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert "^t Answer" not in screen_text(app)
            await pilot.press("ctrl+t")
            await wait_for(pilot, lambda: any("This model does not think" in str(n.message)
                                              for n in app._notifications),  # noqa: SLF001
                           what="the note that the model does not think")
            assert engine.thoughts_ended == 0 and "Thinking budget" not in _commands(app)

    run(scenario())
