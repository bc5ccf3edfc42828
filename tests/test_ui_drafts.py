"""The chat's status bar says what drafting buys: 'draft 2.4/step' (the tokens each step that
verified a draft emitted) while and after an answer whose engine verified drafts, nothing when
no draft step ran. The formatter alone, the bar's parts, and inside `run_test()` with the
scripted engine (its stats count draft steps as the real engines do)."""

from __future__ import annotations

from support.scripted_engine import Factory, Reply, ScriptedEngine
from support.uitools import SIZE, answered, ready, run, send, status_text, wait_for

from pocketchat.engines.types import Stats
from pocketchat.ui.app import create_app
from pocketchat.ui.fitline import fit, plain
from pocketchat.ui.format import draft_figure
from pocketchat.ui.widgets import figures_from_stats, status_parts

ANSWER = " ".join(f"word{i}" for i in range(60))


def test_the_draft_figure_is_tokens_per_step_or_nothing():
    assert draft_figure(2.4) == "draft 2.4/step"
    assert draft_figure(1.0) == "draft 1.0/step"  # steps ran, nothing accepted: said so
    assert draft_figure(3.456) == "draft 3.5/step"
    assert draft_figure(0.0) == ""


def test_the_bar_shows_the_figure_from_the_answer_stats_only_when_drafts_were_verified():
    drafted = Stats(generated_tokens=48, decode_seconds=1.0, draft_steps=20, drafted_tokens=80,
                    accepted_tokens=28)
    line = plain(fit(status_parts(figures_from_stats(drafted, "Answering", None, 4096, None), "ok"), 200))
    assert "draft 2.4/step" in line
    plain_stats = Stats(generated_tokens=48, decode_seconds=1.0)
    line = plain(fit(status_parts(figures_from_stats(plain_stats, "Answering", None, 4096, None), "ok"), 200))
    assert "draft" not in line
    # A narrow bar lets the figure go before the state, the speed and the context.
    narrow = plain(fit(status_parts(figures_from_stats(drafted, "Answering", 10**9, 4096, None), "ok"), 50))
    assert "draft" not in narrow and "Answering" in narrow and "tok/s" in narrow


def test_the_status_bar_shows_accepted_drafts_per_step_while_and_after_the_answer():
    engine = ScriptedEngine([Reply(ANSWER, hold_after=30, draft_per_step=2.5), Reply("Plain answer.")])

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 250_000_000)
        async with app.run_test(size=(160, 40)) as pilot:
            await ready(pilot)
            assert "draft" not in status_text(app)
            await send(pilot, "Count, please.")
            await wait_for(pilot, engine.held.is_set, what="the answer under way")
            await wait_for(pilot, lambda: "draft 2.5/step" in status_text(app),
                           what="the draft figure while streaming")
            engine.release.set()
            await answered(pilot)
            bar = status_text(app)
            assert "Ready" in bar and "draft 2.5/step" in bar  # kept with the answer's figures
            # The next answer verified no draft: the figure goes.
            engine.release.clear()
            await send(pilot, "And now?")
            await answered(pilot)
            assert "Ready" in status_text(app) and "draft" not in status_text(app)

    run(scenario())


def test_no_draft_figure_when_the_engine_drafts_nothing():
    engine = ScriptedEngine([Reply(ANSWER)])

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 250_000_000)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "Count, please.")
            await answered(pilot)
            assert "tok/s" in status_text(app) and "draft" not in status_text(app)

    run(scenario())
