"""The chat's dialogs at 80 and 120 columns: laid out within the screen, every line of their
text on screen (none cut at the dialog's edge), and a question asked while the model loads
drawn on a clear screen, not over the loading box that keeps ticking under it."""

from __future__ import annotations

import threading

import pytest
from support.scripted_engine import Factory, ScriptedEngine
from support.uitools import ready, run, screen_text, wait_for
from textual.containers import ScrollableContainer, VerticalScroll
from textual.geometry import Region

from pocketchat.conversations import Conversation
from pocketchat.ui.app import create_app
from pocketchat.ui.screens import (ConfirmScreen, ConversationsScreen, InfoScreen, LoadingScreen,
                                   SystemPromptScreen)

WIDTHS = [80, 120]
LONG_LINES = "\n".join(f"line {i:02d}: " + " ".join(f"w{i}{j}" for j in range(16 + i % 5)) + f" end{i:02d}"
                       for i in range(12))
ABOUT = f"# Hardware and recommendation\n\nRunning **Scripted-1B**.\n\n```text\n{LONG_LINES}\n```"
QUESTION = ("Download POCKET-35B-Q2_K (12.9 GB) from Hugging Face into "
            "/home/user/.cache/huggingface/hub? [y/N]")


def make(**kwargs):
    return create_app(Factory(ScriptedEngine()), memory_probe=lambda: 1, **kwargs)


def assert_within_the_screen(app) -> None:
    """Every widget of the dialog inside the screen (what scrolls inside a box aside)."""
    screen = Region(0, 0, *app.size)
    for widget in app.screen.query("*"):
        scrolled = any(isinstance(a, ScrollableContainer) for a in widget.ancestors)
        if widget.display and widget.region and not scrolled:
            assert screen.contains_region(widget.region), (widget, widget.region, app.size)


def boxes(text: str) -> int:
    """How many boxes have their top-left corner on screen."""
    return sum(line.count("╭") for line in text.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_the_hardware_page_shows_every_line_whole(width):
    async def scenario():
        app = make(about=ABOUT)
        async with app.run_test(size=(width, 30)) as pilot:
            await ready(pilot)
            app.action_about()
            await wait_for(pilot, lambda: isinstance(app.screen, InfoScreen), what="the page")
            await pilot.pause()
            assert_within_the_screen(app)
            page = app.screen.query_one(VerticalScroll)
            seen = ""
            for y in range(0, 60, 5):  # read the page down as a user scrolls it
                page.scroll_to(y=y, animate=False, immediate=True)
                await pilot.pause()
                seen += screen_text(app)
            missing = [f"end{i:02d}" for i in range(12) if f"end{i:02d}" not in seen]
            assert not missing, f"cut at the dialog's edge: {missing}"

    run(scenario())


@pytest.mark.parametrize("width", WIDTHS)
def test_a_question_while_loading_is_drawn_on_a_clear_screen(width):
    asked_again = threading.Event()
    go = threading.Event()

    def prepare(hooks) -> None:
        hooks.confirm(QUESTION)
        asked_again.set()
        go.wait(10)  # the loading screen stays while the test looks at it

    async def scenario():
        app = make(prepare=prepare)
        async with app.run_test(size=(width, 24)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
            await pilot.pause(0.7)  # the loading box ticks every 0.5 s
            text = screen_text(app)
            assert boxes(text) == 1, text  # the question's box alone, no loading box under it
            assert "Download POCKET-35B-Q2_K (12.9 GB)" in text and "[y/N]" in text
            assert_within_the_screen(app)
            await pilot.press("n")
            await wait_for(pilot, asked_again.is_set, what="the answer")
            await wait_for(pilot, lambda: isinstance(app.screen, LoadingScreen), what="the loading box")
            await pilot.pause()
            box = app.screen.query_one(".startup-box").region
            assert box.width and abs(box.x - (width - box.right)) <= 1, (box, width)  # centred
            go.set()
            await ready(pilot)

    try:
        run(scenario())
    finally:
        go.set()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_dialog_is_laid_out_within_the_screen(width):
    saved = [Conversation(title="A conversation whose title is rather long for a narrow terminal "
                                "window, as titles from a first message can be")]
    saved[0].add("user", "hello")

    async def scenario():
        app = make(about=ABOUT)
        async with app.run_test(size=(width, 24)) as pilot:
            await ready(pilot)
            for dialog in (ConfirmScreen(QUESTION), SystemPromptScreen("Be brief."),
                           ConversationsScreen(saved), InfoScreen(ABOUT)):
                app.push_screen(dialog)
                await pilot.pause()
                assert_within_the_screen(app)
                app.pop_screen()
                await pilot.pause()

    run(scenario())
