"""Snapshots of the chat's main screens (pytest-textual-snapshot; update with --snapshot-update)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from support.scripted_engine import Factory, Reply, ScriptedEngine
from support.uitools import ReadingEngine, answered, ready, screen_text, send, wait_for
from pocketchat.conversations import Conversation
from pocketchat.ui.app import create_app
from pocketchat.ui.screens import ConfirmScreen, InfoScreen
from pocketchat.ui.widgets import Notice, PromptInput

SIZE = (90, 30)

ANSWER = """Here is a function that adds two numbers:

```python
def add(a: int, b: int) -> int:
    return a + b
```

Call it as `add(2, 3)`."""

THINKING = "The user wants a small Python example. A typed function is clearest."


def app_with(*engines: ScriptedEngine, **kwargs):
    return create_app(Factory(*engines), memory_probe=lambda: 412_000_000, **kwargs)


async def steady(pilot) -> None:
    await ready(pilot)
    pilot.app.query_one(PromptInput).cursor_blink = False


def test_empty_chat(snap_compare):
    assert snap_compare(app_with(ScriptedEngine()), terminal_size=SIZE, run_before=steady)


def test_answer_with_thinking_and_a_code_block(snap_compare):
    conversation = Conversation(id="snapshot-1", model="Scripted-1B")
    conversation.add("user", "Show me a Python function that adds two numbers.")
    conversation.add("assistant", ANSWER, thinking=THINKING,
                     stats={"generated_tokens": 48, "decode_tok_s": 38.5, "ttft_seconds": 0.21})

    async def open_thinking(pilot):
        await steady(pilot)
        await pilot.click("CollapsibleTitle")
        await pilot.pause()

    app = app_with(ScriptedEngine(), conversation=conversation)
    assert snap_compare(app, terminal_size=SIZE, run_before=open_thinking)


def test_status_bar_mid_stream(snap_compare):
    engine = ScriptedEngine([Reply(ANSWER, thinking=THINKING, hold_after=30)])

    async def mid_stream(pilot):
        await steady(pilot)
        await send(pilot, "Show me a Python function that adds two numbers.")
        await wait_for(pilot, engine.held.is_set)
        await wait_for(pilot, lambda: "30 tokens" in pilot.app.query_one("#status").plain)
        await wait_for(pilot, lambda: any("12 tokens" in str(box.title)  # the title's own update
                                          for box in pilot.app.query("Collapsible.thinking")))
        await pilot.pause(0.2)

    assert snap_compare(app_with(engine), terminal_size=SIZE, run_before=mid_stream)


def test_engine_crash_message(snap_compare):
    engine = ScriptedEngine([Reply("It starts to answer and then", crash_after=4)])

    async def crash(pilot):
        await steady(pilot)
        await send(pilot, "What happens when the worker dies?")
        await answered(pilot)
        await wait_for(pilot, lambda: pilot.app.query(Notice))
        await pilot.pause()

    assert snap_compare(app_with(engine), terminal_size=SIZE, run_before=crash)


WIDTHS = [80, 120]


@pytest.mark.parametrize("width", WIDTHS)
def test_status_bar_while_a_prompt_is_read(snap_compare, width):
    engine = ReadingEngine(info=replace(ScriptedEngine().info, n_ctx=32768))

    async def reading(pilot):
        await steady(pilot)
        await send(pilot, "Summarise this document.")
        await wait_for(pilot, engine.held.is_set)
        await wait_for(pilot, lambda: "Reading" in pilot.app.query_one("#status").plain)
        await pilot.pause(0.2)

    app = create_app(Factory(engine), memory_probe=lambda: 13_400_000_000)
    try:
        assert snap_compare(app, terminal_size=(width, 24), run_before=reading)
    finally:
        engine.release.set()


ABOUT = "# Hardware and recommendation\n\nRunning **Scripted-1B** (CPU, 2 threads).\n\n```text\n" + "\n".join(
    f"line {i:02d}: " + " ".join(f"w{i}{j}" for j in range(16 + i % 5)) + f" end{i:02d}" for i in range(12)
) + "\n```"


@pytest.mark.parametrize("width", WIDTHS)
def test_hardware_page(snap_compare, width):
    async def about(pilot):
        await steady(pilot)
        pilot.app.action_about()
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, InfoScreen))
        await pilot.pause(0.2)

    app = app_with(ScriptedEngine(), about=ABOUT)
    assert snap_compare(app, terminal_size=(width, 30), run_before=about)


@pytest.mark.parametrize("width", WIDTHS)
def test_download_question_while_loading(snap_compare, width):
    answered_ = threading.Event()

    def prepare(hooks):
        hooks.confirm("Download POCKET-35B-Q2_K (12.9 GB) from Hugging Face into "
                      "/home/user/.cache/huggingface/hub? [y/N]")
        answered_.set()

    async def asked(pilot):
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
        await pilot.pause(0.7)  # the loading box would have ticked under it

    app = app_with(ScriptedEngine(), prepare=prepare)
    assert snap_compare(app, terminal_size=(width, 24), run_before=asked)


def test_a_thought_streaming_folded_with_its_figures(snap_compare):
    thought = " ".join(f"idea{i}" for i in range(80))
    engine = ScriptedEngine([Reply(ANSWER, thinking=thought, hold_after=24)])

    async def mid_thought(pilot):
        await steady(pilot)
        await send(pilot, "Show me a Python function that adds two numbers.")
        await wait_for(pilot, engine.held.is_set)
        await wait_for(pilot, lambda: "think 24/64" in pilot.app.query_one("#status").plain)
        await wait_for(pilot, lambda: "Thinking · 24 tokens" in screen_text(pilot.app),
                       what="the thought's title on the screen")  # laid out, not only set
        await pilot.pause(0.2)

    try:
        assert snap_compare(app_with(engine, thinking_budget=64), terminal_size=SIZE,
                            run_before=mid_thought)
    finally:
        engine.release.set()
