"""The chat's bars at 80 and 120 columns: the status bar, the header and the footer each fit
their row (what gives way first is decided, never cut at the edge), and they say the truth: no
`mem ?` once the worker is gone, the context meter agrees with a restored state's figure."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from support.scripted_engine import Factory, Reply, ScriptedEngine
from support.uitools import ReadingEngine, answered, ready, run, screen_text, send, status_text, wait_for

from pocketchat.conversations import Conversation
from pocketchat.engines.state.saved_state import state_key, write_meta
from pocketchat.ui.app import create_app
from pocketchat.ui.fitline import Part, fit, plain
from pocketchat.ui.widgets import EngineHeader, StatusBar

WIDTHS = [80, 120]


def rows(app) -> list[str]:
    return screen_text(app).splitlines()


def bar_rows(app) -> tuple[str, str, str]:
    """The header, the status bar and the footer as they are on screen."""
    screen = rows(app)
    return screen[0], screen[-2], screen[-1]


def test_the_least_kept_part_gives_way_first_and_the_line_keeps_its_order():
    parts = [Part.of("Reading the prompt 1,536/4,075 tokens", 100),
             Part.of("240 tok/s", 69, sep=" · "), Part.of("10.6 s left", 68, sep=" · "),
             Part.of("– tok/s", 10), Part.of("ctx 1536/32.8k ▍░░░░░░░", 65, shorter=[("ctx 1536/32.8k", 90)]),
             Part.of("mem 13.4 GB", 40)]
    wide = plain(fit(parts, 200))
    assert wide == ("Reading the prompt 1,536/4,075 tokens · 240 tok/s · 10.6 s left  – tok/s  "
                    "ctx 1536/32.8k ▍░░░░░░░  mem 13.4 GB")
    for width in range(10, 200):
        line = plain(fit(parts, width))
        assert len(line) <= width, (width, line)
        assert line.startswith("Reading")  # the most kept part is there at every width
    assert plain(fit(parts, 78)) == "Reading the prompt 1,536/4,075 tokens · 240 tok/s  ctx 1536/32.8k ▍░░░░░░░"
    assert plain(fit(parts, 53)) == "Reading the prompt 1,536/4,075 tokens  ctx 1536/32.8k"
    # one cell less: the context goes, and the room left takes back the rate
    assert plain(fit(parts, 52)) == "Reading the prompt 1,536/4,075 tokens · 240 tok/s"
    assert plain(fit(parts, 20)) == "Reading the prompt…"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_status_bar_fits_while_a_prompt_is_read(width):
    engine = ReadingEngine(info=replace(ScriptedEngine().info, n_ctx=32768))

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 13_400_000_000)
        async with app.run_test(size=(width, 24)) as pilot:
            await ready(pilot)
            await send(pilot, "a long document")
            await wait_for(pilot, engine.held.is_set)
            await wait_for(pilot, lambda: "Reading" in status_text(app), what="the progress")
            await pilot.pause(0.2)
            header, status, footer = bar_rows(app)
            bar = app.query_one(StatusBar)
            assert len(status_text(app)) <= bar.content_size.width, status_text(app)
            assert status.strip() == status_text(app)  # on screen whole, not cut at the edge
            assert "Reading the prompt 1,536/4,075 tokens" in status and "ctx 1536/32.8k" in status
            if width >= 120:
                assert "10.6 s left" in status and "mem 13.4 GB" in status
            assert "Restart engine" in footer and "palette" in footer
            engine.release.set()
            await pilot.press("escape")
            await answered(pilot)

    run(scenario())


@pytest.mark.parametrize("width", WIDTHS)
def test_after_a_worker_crash_the_bars_fit_and_say_no_memory_is_held(width):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        engine = ScriptedEngine([Reply("It starts to answer and then", crash_after=4)], pid=sleeper.pid)

        async def scenario():
            app = create_app(Factory(engine))  # the app's own probe, on the worker's pid
            async with app.run_test(size=(width, 24)) as pilot:
                await ready(pilot)
                await wait_for(pilot, lambda: "mem –" not in status_text(app), what="a memory figure")
                await send(pilot, "What happens when the worker dies?")
                sleeper.kill()
                sleeper.wait()
                await answered(pilot)
                await wait_for(pilot, lambda: app.engine is None, what="the engine to be let go")
                app._sample_memory()  # the 2 s probe, at once
                await pilot.pause()
                header, status, _ = bar_rows(app)
                assert "mem ?" not in status and "mem –" in status, status
                assert header.rstrip().endswith("engine stopped"), header  # whole, not cut

        run(scenario())
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_header_keeps_the_model_and_the_state_when_the_row_is_short(width):
    long_name = "POCKET-35B-Q4_K_M-a-rather-long-build-name-from-a-folder"
    engine = ScriptedEngine(info=replace(ScriptedEngine().info, model=long_name,
                                         placement="gpu+cpu-experts", n_ctx=131072))

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 1)
        async with app.run_test(size=(width, 24)) as pilot:
            await ready(pilot)
            app.query_one(EngineHeader).show(app.info, "engine stopped")
            await pilot.pause()
            header = bar_rows(app)[0].strip()
            assert len(header) <= width - 2, header
            assert long_name in header and header.endswith("engine stopped"), header

    run(scenario())


class StatefulScripted(ScriptedEngine):
    """A scripted engine with saved states, as the real ones keep them: after an answer the
    state also holds the end of the turn (3 tokens past the answer's last figure)."""

    def save_state(self, path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"state")
        write_meta(path, state_key("", "llama.cpp", self.info.n_ctx, ""), 532)
        return 5

    def load_state(self, path: Path) -> str | None:
        return None


def test_the_context_meter_agrees_with_the_restored_state():
    saved = Conversation()
    saved.add("user", "hello")
    saved.add("assistant", "hi", stats={"generated_tokens": 2, "context_used": 529, "context_limit": 4096})
    saved.save()
    engine = StatefulScripted()
    engine.save_state(saved.state_path)

    async def scenario():
        app = create_app(Factory(engine), conversation=saved, memory_probe=lambda: 1)
        async with app.run_test(size=(100, 30)) as pilot:
            await ready(pilot)
            await wait_for(pilot, lambda: "Restored" in screen_text(app), what="the restore note")
            await pilot.pause()
            assert "(532 tokens of context)" in screen_text(app)
            assert "ctx 532/4096" in status_text(app), status_text(app)

    run(scenario())
