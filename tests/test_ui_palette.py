"""The command palette: system prompt, thinking, copy, hardware, saved conversations."""

from __future__ import annotations

import pytest

from support.scripted_engine import Reply
from support.uitools import SIZE, answered, make, ready, run, screen_text, send
from pocketchat import conversations
from pocketchat.ui.screens import ConversationsScreen, SystemPromptScreen


async def palette(pilot, command: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*command)
    await pilot.pause(0.3)
    await pilot.press("enter")
    await pilot.pause()


@pytest.mark.slow
def test_palette_system_prompt_and_thinking_reach_the_model():
    async def scenario():
        app, engine, _ = make(Reply("ok", thinking="hmm"))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await palette(pilot, "System prompt")
            assert isinstance(app.screen, SystemPromptScreen)
            await pilot.press(*"Answer in French.", "ctrl+s")
            await pilot.pause()
            await palette(pilot, "Thinking off")
            await send(pilot, "hi")
            await answered(pilot)
            messages, options = engine.calls[0]
            assert messages[0].role == "system" and messages[0].content == "Answer in French."
            assert options.thinking is False
            assert "Thinking" not in screen_text(app)  # no thinking shown when it is off

    run(scenario())


@pytest.mark.slow
def test_palette_copies_the_last_answer_and_opens_a_saved_conversation():
    async def scenario():
        old = conversations.Conversation(model="Scripted-1B")
        old.add("user", "an old question")
        old.add("assistant", "an old answer", interrupted=True)
        old.save()
        (old.path.parent / "junk.json").write_text("{not json")
        app, _, _ = make(Reply("Copy me."))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "say it")
            await answered(pilot)
            await palette(pilot, "Copy last answer")
            assert app.clipboard == "Copy me."
            await palette(pilot, "Open a saved conversation")
            assert isinstance(app.screen, ConversationsScreen)
            listing = screen_text(app)
            assert "an old question" in listing and "(interrupted)" in listing
            assert "say it" in listing
            await pilot.press("down", "enter")  # newest first: ours, then the old one
            await pilot.pause()
            text = screen_text(app)
            assert "an old answer" in text and "interrupted" in text and "Copy me." not in text
            assert app.conversation.id == old.id

    run(scenario())


@pytest.mark.slow
def test_palette_shows_hardware_and_recommendation():
    async def scenario():
        app, _, _ = make(about=lambda: "Recommended: POCKET-Q4 (13 GB) because it fits in 32 GB.")
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await palette(pilot, "Hardware and recommendation")
            text = screen_text(app)
            assert "Placement: CPU, 2 threads" in text
            assert "Recommended: POCKET-Q4 (13 GB) because it fits in 32 GB." in text
            await pilot.press("escape")
            await pilot.pause()
            assert "Recommended: POCKET-Q4" not in screen_text(app)

    run(scenario())
