"""Helpers for driving the chat app in tests: wait for a condition, read what is on screen."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from support.scripted_engine import Factory, Reply, ScriptedEngine
from textual.pilot import Pilot

from pocketchat.engines.types import Chunk, PromptProgress, Stats

from pocketchat.ui.app import create_app
from pocketchat.ui.widgets import StatusBar

SIZE = (100, 32)


class ReadingEngine(ScriptedEngine):
    """A scripted engine that reads a long prompt: one progress chunk (1,536 of 4,075 tokens
    after 6.4 s), then it holds until released or cancelled."""

    def _stream(self, messages, reply, options):
        stats = Stats(prompt_length=4075, context_limit=self.info.n_ctx, context_used=1536)
        yield Chunk(stats=stats, progress=PromptProgress(1536, 4075, 6.4))
        self.held.set()
        while not (self.release.wait(0.01) or self._cancel.is_set()):
            pass
        yield Chunk(stats=stats, finish_reason="cancelled")


def make(*replies: Reply, **kwargs):
    """An app on a scripted engine (fixed memory figure); returns (app, engine, factory)."""
    engine = ScriptedEngine(list(replies) or [Reply("Hello from the script.")],
                            delay=kwargs.pop("delay", 0.0))
    factory = kwargs.pop("factory", None) or Factory(engine)
    app = create_app(factory, memory_probe=lambda: 250_000_000, **kwargs)
    return app, engine, factory


async def wait_for(pilot: Pilot, condition: Callable[[], object], timeout: float = 10.0,
                   what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.02)


async def ready(pilot: Pilot, timeout: float = 10.0) -> None:
    """Wait until the engine is open and the chat screen is on top."""
    app = pilot.app
    await wait_for(pilot, lambda: app.engine is not None and app.screen is app.screen_stack[0],
                   timeout, "the engine to open")
    await pilot.pause()


async def answered(pilot: Pilot, timeout: float = 10.0) -> None:
    await wait_for(pilot, lambda: pilot.app.stream is None, timeout, "the answer to finish")
    await pilot.pause()


async def send(pilot: Pilot, text: str) -> None:
    prompt = pilot.app.query_one("#prompt")
    prompt.focus()
    prompt.load_text(text)
    await pilot.press("enter")


def status_text(app) -> str:
    return app.query_one(StatusBar).plain


def screen_text(app) -> str:
    """Every line on the current screen, as a user would read it."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)


SCROLLBAR = " ▁▂▃▄▅▆▇█▔"


def blank_rows_under_the_text(screen: str) -> int:
    """Rows of the chat log with no text between the last one with text and the prompt's box
    (a row holding only the messages' left border or the scrollbar has no text)."""
    lines = screen.splitlines()
    prompt = next(i for i, line in enumerate(lines) if "╭" in line)
    last = max(i for i, line in enumerate(lines[:prompt]) if line.strip(SCROLLBAR + "▌▐"))
    return prompt - last - 1


def run(coro) -> None:
    asyncio.run(coro)


def run_scripted_chat(spec: str) -> None:
    """Run the chat app in this terminal on a scripted engine (the tmux tests start it so):
    `spec` is a JSON file {"text": the answer to every prompt, "delay": seconds per token,
    "thinking": the thought before it (optional), "thinking_budget": the chat's budget}."""
    import json
    from pathlib import Path

    data = json.loads(Path(spec).read_text())
    app, _, _ = make(Reply(data["text"], thinking=data.get("thinking", "")),
                     delay=data.get("delay", 0.02), thinking_budget=data.get("thinking_budget"))
    app.run()
