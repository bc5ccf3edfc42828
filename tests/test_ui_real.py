"""The chat app with the real starter model (SmolLM2-135M through llama.cpp in its worker)."""

from __future__ import annotations

import re

import pytest
from support.uitools import answered, ready, run, screen_text, send, status_text, wait_for
from pocketchat import conversations
from pocketchat.engines.types import ChatOptions

pytestmark = pytest.mark.slow

TOK_S = re.compile(r"(\d+(?:\.\d+)?) tok/s")


@pytest.fixture
def real_factory(starter_gguf):
    pytest.importorskip("llama_cpp")

    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection
    from pocketchat.engines import open_engine

    args = Selection(model="starter", ctx=2048, offline=True, yes=True)
    choice = choose_model(args)
    assert choice.path == starter_gguf
    return lambda: open_engine(choice.plan, choice.path, name=choice.name)


def test_real_starter_streams_shows_tok_s_stops_and_saves(real_factory):
    async def scenario():
        from pocketchat.ui.app import create_app

        app = create_app(real_factory, thinking=False,
                         options=ChatOptions(max_tokens=48, temperature=0.0, seed=1))
        async with app.run_test(size=(100, 30)) as pilot:
            await ready(pilot, timeout=90)
            assert "SmolLM2" in screen_text(app)
            await send(pilot, "Name three colours.")
            await answered(pilot, timeout=60)
            answer = app.conversation.messages[-1]
            assert answer.role == "assistant" and len(answer.content.strip()) > 0
            assert answer.content.strip()[:20] in " ".join(screen_text(app).split())
            speed = TOK_S.search(status_text(app))
            assert speed and float(speed.group(1)) > 0, status_text(app)

            # Esc mid-answer: the app stays, the partial answer is saved, marked interrupted
            app.base_options = ChatOptions(max_tokens=400, temperature=0.0, seed=1,
                                           ignore_eos=True)
            await send(pilot, "Tell me a long story about a dragon.")
            await wait_for(pilot, lambda: len(app.conversation.messages[-1].content) > 20,
                           30, "the story to start")
            await pilot.press("escape")
            await answered(pilot, timeout=30)
            saved = conversations.load(app.conversation.id).messages[-1]
            assert saved.interrupted and len(saved.content) > 20
            assert saved.stats["generated_tokens"] < 400
            assert app.is_running and app.engine is not None
            await pilot.press("ctrl+n")
            await pilot.pause()
            assert "dragon" not in screen_text(app)

    run(scenario())
