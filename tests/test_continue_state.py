"""`pocketchat --continue` of a long chat on POCKET's architecture: the app saves the model's
state beside the conversation after each answer and restores it when the conversation reopens,
so the first answer evaluates only the new message (tiny qwen35moe, llama.cpp in its worker)."""

from __future__ import annotations

import os
import threading

import pytest
from support.uitools import answered, ready, run, screen_text, send, wait_for
from pocketchat import conversations
from pocketchat.engines import open_engine
from pocketchat.engines.llamacpp.engine import LlamaCppEngine
from pocketchat.engines.types import ChatOptions
from pocketchat.types import LoadPlan
from pocketchat.ui.app import create_app

pytestmark = pytest.mark.slow

TURNS = 10
SLACK = 16  # the bar: new message + generation prompt + 16
OPTIONS = ChatOptions(temperature=0.0, max_tokens=6)


def plan(n_ctx: int = 4096) -> LoadPlan:
    return LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=n_ctx,
                    n_threads=1, n_threads_batch=1)


def message(turn: int) -> str:
    return f"Turn {turn}. Tell me about the number {turn * 17}, its digits and one fact about it."


def chat_app(path, n_ctx: int = 4096, conversation=None, thinking: bool = False):
    return create_app(lambda: open_engine(plan(n_ctx), path, name="tiny-qwen35moe"),
                      conversation=conversation, thinking=thinking, options=OPTIONS)


async def chat(path, turns: range, conversation=None, n_ctx: int = 4096, expect: str = "",
               thinking: bool = False):
    """Run the app, send one message per turn; the conversation and what the screen showed."""
    app = chat_app(path, n_ctx, conversation, thinking)
    async with app.run_test(size=(100, 32)) as pilot:
        await ready(pilot, timeout=60)
        if expect:
            try:
                await wait_for(pilot, lambda: expect in " ".join(screen_text(app).split()), 30,
                               f"the notice {expect!r}")
            except AssertionError as missing:
                from pocketchat.ui.widgets import Notice
                notices = [str(n.render()) for n in app.query(Notice)]
                raise AssertionError(f"{missing}; notices {notices}, restored "
                                     f"{app.chat._restored.is_set()}, the screen:\n"
                                     f"{screen_text(app)}") from None
        for turn in turns:
            await send(pilot, message(turn))
            await answered(pilot, timeout=60)
        shown = " ".join(screen_text(app).split())
    return app.conversation, shown  # leaving run_test waits for the state to be saved


def evaluated_bound(path, conversation, thinking: bool) -> int:
    """Tokens of the last user message with its role header and the generation prompt."""
    msgs = conversation.engine_messages()
    if msgs[-1].role == "assistant":
        msgs = msgs[:-1]  # up to the new user message
    counter = LlamaCppEngine(plan(), path)
    try:
        whole = counter._encode(counter.render(msgs, thinking))
        before = counter._encode(counter.render(msgs[:-1], thinking, generation=False))
    finally:
        counter.close()
    return len(whole) - len(before) + SLACK


@pytest.mark.parametrize("thinking", [False, True], ids=["thinking-off", "thinking-on"])
def test_continue_of_ten_turns_reads_only_the_new_message(tiny_qwen35, thinking):
    first, _ = run_app(chat(tiny_qwen35, range(1, TURNS + 1), thinking=thinking))
    state = first.state_path
    assert state.is_file() and state.stat().st_size > 0
    assert state.stat().st_mode & 0o077 == 0  # private, like the conversation itself

    again, _ = run_app(chat(tiny_qwen35, range(TURNS + 1, TURNS + 2), conversations.last(),
                            expect="Restored the model's state", thinking=thinking))
    stats = again.messages[-1].stats
    assert again.id == first.id and len(again.messages) == 2 * (TURNS + 1)
    assert stats["prompt_tokens"] <= evaluated_bound(tiny_qwen35, again, thinking), stats
    assert stats["reused_tokens"] > 0.8 * stats["prompt_length"], stats


def test_continue_without_a_usable_state_says_so_and_reads_it_all(tiny_qwen35):
    run_app(chat(tiny_qwen35, range(1, 4)))
    # another context size: the state is ignored with a note, the answer still comes
    again, _ = run_app(chat(tiny_qwen35, range(4, 5), conversations.last(), n_ctx=2048,
                            expect="made with another context size"))
    stats = again.messages[-1].stats
    assert stats["reused_tokens"] == 0 and stats["prompt_tokens"] == stats["prompt_length"]
    assert again.messages[-1].content and not again.messages[-1].interrupted

    # no state at all (deleted): the app says the first answer reads the whole chat again
    again.state_path.unlink()
    run_app(chat(tiny_qwen35, range(5, 5), conversations.last(), n_ctx=2048,
                 expect="No saved model state for this chat"))


def run_app(coro):
    box = []

    async def main():
        box.append(await coro)

    run(main())
    return box[0]


def test_saved_states_are_bounded_to_the_latest_conversations(tmp_path):
    folder = tmp_path / "states"
    folder.mkdir()
    for k in range(5):
        p = folder / f"c{k}.state"
        p.write_bytes(b"x" * 10)
        (folder / f"c{k}.state.json").write_text("{}")
        os.utime(p, (1000 + k, 1000 + k))
    gone = conversations.prune_states(folder, keep=3)
    assert sorted(p.name for p in gone) == ["c0.state", "c1.state"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "c2.state", "c2.state.json", "c3.state", "c3.state.json", "c4.state", "c4.state.json"]


def sent_text(app) -> str:
    """The user's messages in the chat log (not the prompt's text)."""
    from pocketchat.ui.widgets import UserMessage
    return "\n".join(str(m.render()) for m in app.query(UserMessage))


def test_a_message_sent_while_the_state_is_saved_shows_at_once_and_waits_its_turn(tmp_path, monkeypatch):
    """A slow state save (POCKET's is ~150 MB) never eats a message: it shows at once, and
    its answer starts once the save ends, one engine call at a time. The screen updates
    slowly here (a busy machine's pace), so the message is sent after the answer ended but
    before the screen's next tick closed it."""
    from support.scripted_engine import Factory, Reply, ScriptedEngine
    from pocketchat.ui import chat, streaming

    monkeypatch.setattr(chat, "RenderPacer", lambda: streaming.RenderPacer(max_rate=0.5, min_rate=0.5))

    class SlowSaving(ScriptedEngine):
        def save_state(self, path):
            self.saving.set()
            self.release_save.wait(10)
            self.saves.append(str(path))
            return 1

        def load_state(self, path):
            return None

    engine = SlowSaving([Reply("First answer."), Reply("Second answer.")])
    engine.saving, engine.release_save, engine.saves = threading.Event(), threading.Event(), []

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 1)
        async with app.run_test(size=(100, 32)) as pilot:
            await ready(pilot)
            await send(pilot, "one")
            await wait_for(pilot, engine.saving.is_set, 10, "the state save to start")
            await send(pilot, "two, sent while the state is saved")
            await wait_for(pilot, lambda: "two, sent while" in sent_text(app), 5, "the message")
            assert app.query_one("#prompt").text == ""  # taken, not left in the prompt
            assert len(engine.calls) == 1  # the engine is not asked before the save ends
            engine.release_save.set()
            await wait_for(pilot, lambda: "Second answer." in screen_text(app), 10, "the answer")
            assert len(engine.calls) == 2 and len(engine.saves) >= 1

    run(scenario())
