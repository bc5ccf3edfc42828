"""The chat's thinking: the thought streams folded under 'Thinking · N tokens · S s', Ctrl+T
(in the key bar and the palette) ends it and the answer follows, the status bar counts the
thought against the budget, the palette sets the budget; Esc still stops. Inside `run_test()`
with the scripted engine, which thinks as the real engines do with a budget."""

from __future__ import annotations

import re

import pytest
from support.scripted_engine import CLOSING, Factory, Reply, ScriptedEngine, tokens
from support.uitools import SIZE, answered, ready, run, screen_text, send, status_text, wait_for

from pocketchat.ui.answer import AnswerView
from pocketchat.ui.app import create_app
from pocketchat.ui.screens import ThinkingBudgetScreen

THOUGHT = " ".join(f"idea{i}" for i in range(200))
ANSWER = "Because of Rayleigh scattering."


def app_on(engine: ScriptedEngine, **kwargs):
    return create_app(Factory(engine), memory_probe=lambda: 250_000_000, **kwargs)


def thinking_title(app) -> str:
    view = app.query(AnswerView).last()
    box = view.query_one("Collapsible.thinking")
    return str(box.title)


def test_ctrl_t_ends_the_thought_and_the_answer_follows():
    engine = ScriptedEngine([Reply(ANSWER, thinking=THOUGHT, hold_after=20)])

    async def scenario():
        app = app_on(engine, thinking_budget=lambda: 500)  # --think's budget, known at start
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert "^t Answer " in screen_text(app)  # in the key bar
            await send(pilot, "Why is the sky blue?")
            await wait_for(pilot, engine.held.is_set, what="the thought under way")
            await wait_for(pilot, lambda: "think 20/500" in status_text(app), what="the thought's figure")
            title = thinking_title(app)
            assert re.fullmatch(r"Thinking · 20 tokens · \d+(\.\d)? s", title), title
            box = app.query(AnswerView).last().query_one("Collapsible.thinking")
            assert box.collapsed  # the thought streams folded; a click opens it
            assert "idea5" not in screen_text(app)
            assert engine.calls[-1][1].thinking_budget == 500
            await pilot.press("ctrl+t")
            await answered(pilot)
            assert engine.thoughts_ended == 1
            message = app.conversation.messages[-1]
            assert message.content == ANSWER and not message.interrupted
            assert message.thinking.endswith(CLOSING)  # the closed thought, as the history keeps it
            assert thinking_title(app).startswith(f"Thinking · {20 + len(tokens(CLOSING))} tokens · ")
            assert thinking_title(app).endswith("· ended by you")
            assert ANSWER in screen_text(app)

    run(scenario())


def test_the_budget_closes_the_thought_and_the_title_says_so():
    engine = ScriptedEngine([Reply(ANSWER, thinking=THOUGHT)])

    async def scenario():
        app = app_on(engine, thinking_budget=32)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "Why is the sky blue?")
            await answered(pilot)
            assert engine.calls[-1][1].thinking_budget == 32
            title = thinking_title(app)
            assert title.startswith(f"Thinking · {32 + len(tokens(CLOSING))} tokens · ")
            assert title.endswith("· ended at its budget")
            assert f"think {32 + len(tokens(CLOSING))}/32" in status_text(app)
            assert app.conversation.messages[-1].content == ANSWER

    run(scenario())


def test_esc_still_stops_a_thought_and_ctrl_t_outside_one_says_so():
    engine = ScriptedEngine([Reply(ANSWER, thinking=THOUGHT, hold_after=10), Reply("Plain.")])

    async def scenario():
        app = app_on(engine)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press("ctrl+t")  # idle: nothing to end, said so, nothing sent
            await wait_for(pilot, lambda: "No answer is being written." in
                           [str(n.message) for n in app._notifications],  # noqa: SLF001
                           what="the note that nothing is being written")
            assert engine.thoughts_ended == 0
            await send(pilot, "Why is the sky blue?")
            await wait_for(pilot, engine.held.is_set)
            await pilot.press("escape")
            await answered(pilot)
            message = app.conversation.messages[-1]
            assert message.interrupted and message.content == "" and engine.thoughts_ended == 0
            assert engine.cancels == 1

    run(scenario())


async def palette(pilot, command: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*command)
    await pilot.pause(0.3)
    await pilot.press("enter")
    await pilot.pause()


@pytest.mark.slow
def test_the_palette_sets_the_budget_for_the_session():
    engine = ScriptedEngine([Reply(ANSWER, thinking=THOUGHT)])

    async def scenario():
        app = app_on(engine, thinking_budget=500)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await palette(pilot, "Thinking budget")
            assert isinstance(app.screen, ThinkingBudgetScreen)
            field = app.screen.query_one("#budget-value")
            assert field.value == "500"
            field.value = "lots"
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, ThinkingBudgetScreen)  # kept open, the choices said
            assert "takes off, on, unlimited or a number of tokens" in screen_text(app)
            field.value = "48"
            await pilot.press("enter")
            await pilot.pause()
            await send(pilot, "Why is the sky blue?")
            await answered(pilot)
            opts = engine.calls[-1][1]
            assert opts.thinking and opts.thinking_budget == 48
            await palette(pilot, "Thinking budget")
            app.screen.query_one("#budget-value").value = "off"
            await pilot.press("enter")
            await pilot.pause()
            await send(pilot, "And at sunset?")
            await answered(pilot)
            assert engine.calls[-1][1].thinking is False

    run(scenario())


@pytest.mark.slow
def test_answer_now_is_in_the_palette_while_the_model_thinks():
    engine = ScriptedEngine([Reply(ANSWER, thinking=THOUGHT, hold_after=10)])

    async def scenario():
        app = app_on(engine)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "Why is the sky blue?")
            await wait_for(pilot, engine.held.is_set)
            await palette(pilot, "Answer now")
            await answered(pilot)
            assert engine.thoughts_ended == 1
            assert app.conversation.messages[-1].content == ANSWER

    run(scenario())
