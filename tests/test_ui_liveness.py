"""The chat with an engine whose process stops responding (a scripted `WatchedEngine`): it says
so, Esc ends the answer with its text kept, a send is refused with the draft kept, Ctrl+R
kills the stuck engine and opens a new one, and a process that resumes is said too."""

from __future__ import annotations

from support.scripted_engine import Factory, Reply, ScriptedEngine
from support.uitools import SIZE, ready, run, screen_text, send, status_text, wait_for

from pocketchat.engines.types import Liveness, WatchedEngine
from pocketchat.ui.app import create_app
from pocketchat.ui.widgets import Notice, PromptInput

STOPPED = Liveness(False, 0.5, "stopped")


class StuckEngine(ScriptedEngine):
    """A scripted engine with a process to watch: `alive` is what `liveness()` says."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.alive = Liveness()
        self.killed = 0

    def liveness(self) -> Liveness:
        return self.alive

    def kill(self) -> None:
        self.killed += 1
        self.close()


def notices(app) -> str:
    return "\n".join(str(n.render()) for n in app.query(Notice))


def make_app(*engines: StuckEngine):
    factory = Factory(*engines)
    return create_app(factory, memory_probe=lambda: 250_000_000), factory


def test_a_stuck_engine_is_said_esc_ends_the_answer_and_ctrl_r_kills_and_reopens():
    stuck = StuckEngine([Reply("Once upon a time there was a lighthouse.", hold_after=3)])
    fresh = StuckEngine([Reply("Back again.")])
    assert isinstance(stuck, WatchedEngine)
    app, factory = make_app(stuck, fresh)

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "Tell me a story.")
            await wait_for(pilot, stuck.held.is_set, what="the answer to be under way")
            stuck.alive = STOPPED  # SIGSTOP
            await wait_for(pilot, lambda: "Not responding · Ctrl+R restarts" in screen_text(app),
                           what="the status bar to say so")
            assert "not responding" in app.query_one("#header").render().plain
            said = notices(app)  # in the conversation, below the answer in flight
            assert "The model process is not responding: it was stopped by a signal" in said
            assert "Esc ends the answer here" in said and "Ctrl+R restarts it" in said
            assert "memory" not in said.lower()

            await pilot.press("escape")  # the engine lets the answer go: it ends at once
            await wait_for(pilot, lambda: app.stream is None, what="the answer to end")
            answer = app.conversation.messages[-1]
            assert answer.role == "assistant" and answer.interrupted
            assert answer.content == "Once upon a"  # the text so far is kept
            assert "Not responding" in status_text(app)
            await wait_for(pilot, lambda: "The model process is not responding" in screen_text(app),
                           what="the notice in view once the answer ended")

            prompt = app.query_one(PromptInput)
            await send(pilot, "Are you there?")
            await pilot.pause()
            assert prompt.text == "Are you there?"  # refused: the draft is kept
            assert len(stuck.calls) == 1 and len(app.conversation.messages) == 2

            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.engine is fresh, what="a new engine")
            assert stuck.killed == 1 and len(factory.started) == 2
            assert "Not responding" not in status_text(app)
            await pilot.press("enter")  # the kept draft goes to the new engine
            await wait_for(pilot, lambda: len(app.conversation.messages) == 4 and app.stream is None,
                           what="the answer of the new engine")
            assert app.conversation.messages[-1].content == "Back again."
            assert app.conversation.messages[0].content == "Tell me a story."  # kept

    run(go())


def test_an_engine_that_resumes_is_said_and_answers_again():
    engine = StuckEngine([Reply("Here.")])
    app, factory = make_app(engine)

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            engine.alive = Liveness(False, 3.0, "silent")  # stuck while idle
            await wait_for(pilot, lambda: "nothing heard from it for 3 s" in screen_text(app),
                           what="the chat to say so")  # idle: the notice is in view
            assert "Not responding" in status_text(app)
            engine.alive = Liveness()  # SIGCONT
            await wait_for(pilot, lambda: "responds again" in screen_text(app), what="the resume")
            assert "Not responding" not in status_text(app)
            await send(pilot, "Still there?")
            await wait_for(pilot, lambda: len(app.conversation.messages) == 2 and app.stream is None,
                           what="the answer")
            assert app.conversation.messages[-1].content == "Here."
            assert engine.killed == 0 and len(factory.started) == 1

    run(go())
