"""Files in the chat: Ctrl+O or a pasted path attaches a file as a chip, the file is read
ahead while the question is typed, Enter sends it with the question, and the saved chat keeps
it. The app runs the real starter model (SmolLM2-135M through llama.cpp in its worker)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from support.uitools import answered, ready, run, screen_text, send, status_text, wait_for
from textual import events
from textual.widgets import Input

from pocketchat import conversations
from pocketchat.conversations import ChatMessage, Conversation
from pocketchat.documents import read_path
from pocketchat.engines.types import ChatOptions
from pocketchat.ui.chips import Chip, ChipBar, Pending, chip_line
from pocketchat.ui.pastedpath import pasted_paths, typed_path
from pocketchat.ui.screens import AttachScreen, ConfirmScreen
from pocketchat.ui.widgets import Notice, PromptInput, UserMessage

SIZE = (110, 34)


def notes(folder: Path, lines: int, name: str = "notes.txt") -> Path:
    path = folder / name
    path.write_text("\n".join(f"Line {i}: the lighthouse keeper counted {i * 7} gulls on the "
                              "northern rock." for i in range(lines)) + "\n")
    return path


# -- the pieces, without a model ---------------------------------------------------------------
def test_a_paste_of_paths_is_told_from_text(tmp_path):
    spaced = tmp_path / "my notes.md"
    spaced.write_text("# Notes\n")
    other = notes(tmp_path, 2)
    assert pasted_paths(str(other)) == [other]
    assert pasted_paths(f"  '{spaced}'\n") == [spaced]  # quoted, as a dropped file is
    assert pasted_paths(f'"{spaced}"') == [spaced]
    assert pasted_paths(str(spaced).replace(" ", "\\ ")) == [spaced]  # its space escaped
    assert pasted_paths(str(spaced)) == [spaced]  # not escaped at all
    assert pasted_paths("file://" + quote(str(spaced))) == [spaced]
    assert pasted_paths(f"'{spaced}' {other}") == [spaced, other]  # two files dropped
    assert pasted_paths(f"{spaced}\n{other}") == [spaced, other]
    assert pasted_paths("notes.txt") == []  # a relative name is a word
    assert pasted_paths(f"see {other}") == []  # text that holds a path is text
    assert pasted_paths(str(tmp_path)) == []  # a folder
    assert pasted_paths(str(tmp_path / "missing.txt")) == []
    assert pasted_paths("file://elsewhere/etc/hosts") == []
    assert typed_path(f"'{spaced}'") == spaced
    assert typed_path("~/x.txt") == Path("~/x.txt").expanduser()


def test_a_chip_shows_the_name_tokens_and_time_never_the_text(tmp_path):
    evil = tmp_path / "evil\x1b[2Jname.txt"
    evil.write_text("\x1b]0;TITLE\x07 hello\n")
    pending = Pending.of(read_path(evil))
    line = chip_line(pending)
    assert "\x1b" not in line and "␛" in line and "hello" not in line
    assert "~" in line and "tokens" in line and "reading…" in line  # no rate known yet
    assert "to read" in chip_line(pending, rate=200.0)
    pending.tokens, pending.state = 1234, "read"
    assert "1,234 tokens · read" in chip_line(pending)


def test_a_saved_turn_keeps_its_files_and_older_files_still_load(tmp_path):
    attachment = read_path(notes(tmp_path, 3))
    chat = Conversation(directory=tmp_path)
    chat.add("user", "", attachments=(attachment,))
    assert chat.title == "notes.txt"  # a file sent without a question: its name
    chat.add("assistant", "Three lines.")
    chat.save()
    data = json.loads(chat.path.read_text())
    assert data["messages"][0]["attachments"][0]["sha256"] == attachment.sha256
    assert "attachments" not in data["messages"][1]  # a turn without files is as it was
    again = conversations.load(chat.path)
    assert again.messages[0].attachments == (attachment,)
    sent = again.engine_messages()
    assert sent[0].attachments == (attachment,) and sent[0].content == ""
    old = ChatMessage.from_json({"role": "user", "content": "hi"})
    assert old.attachments == ()


# -- the real chat --------------------------------------------------------------------------------
@pytest.fixture
def real_factory(starter_gguf):
    pytest.importorskip("llama_cpp")

    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection
    from pocketchat.engines import open_engine

    choice = choose_model(Selection(model="starter", ctx=2048, offline=True, yes=True))
    return lambda: open_engine(choice.plan, choice.path, name=choice.name)


def real_app(factory, **kwargs):
    from pocketchat.ui.app import create_app

    return create_app(factory, thinking=False,
                      options=ChatOptions(max_tokens=24, temperature=0.0, seed=1), **kwargs)


def chips(app) -> list[str]:
    return app.query_one(ChipBar).lines()


async def attach_by_key(pilot, path: Path | str) -> None:
    await pilot.press("ctrl+o")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, AttachScreen), 5, "the dialog")
    pilot.app.screen.query_one(Input).value = str(path)
    await pilot.press("enter")
    await wait_for(pilot, lambda: not isinstance(pilot.app.screen, AttachScreen), 5, "it to close")


async def paste(pilot, text: str) -> None:
    prompt = pilot.app.query_one(PromptInput)
    prompt.focus()
    prompt.post_message(events.Paste(text))
    await pilot.pause()


def read(app) -> bool:
    return bool(app.chat.files.pending) and all(p.state == "read" for p in app.chat.files.pending)


def notices(app) -> list[str]:
    return [str(n.render()) for n in app.query(Notice).results(Notice)]


@pytest.mark.slow
def test_attach_by_key_read_ahead_then_the_answer_reads_only_the_question(real_factory, tmp_path):
    path = notes(tmp_path, 40)

    async def scenario():
        app = real_app(real_factory)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot, timeout=90)
            await attach_by_key(pilot, path)
            await wait_for(pilot, lambda: chips(app), 10, "the chip")
            assert "notes.txt" in chips(app)[0] and "tokens" in chips(app)[0]
            assert "notes.txt" in screen_text(app)
            await wait_for(pilot, lambda: read(app), 60, "the file to be read ahead")
            chip = chips(app)[0]
            assert "read" in chip and "~" not in chip, chip  # the engine's count
            tokens = app.chat.files.pending[0].tokens
            assert tokens and tokens > 500
            assert f"ctx {tokens}" in status_text(app)  # the meter counts the file
            await send(pilot, "What did the keeper count on line 3?")
            await wait_for(pilot, lambda: app.conversation.messages[-1].content, 60,
                           "the answer to stream")
            assert not chips(app)  # the chips went with the message
            await answered(pilot, timeout=60)
            question, answer = app.conversation.messages[-2:]
            assert question.attachments[0].name == "notes.txt" and answer.content.strip()
            assert answer.stats["prompt_tokens"] < 64, answer.stats  # only the question was read
            assert answer.stats["reused_tokens"] >= tokens
            shown = app.query(UserMessage).last()
            assert "❐ notes.txt" in str(shown.render()) and "Line 3:" not in str(shown.render())
            assert "tok/s" in screen_text(app)
            chat_id = app.conversation.id
        saved = json.loads(conversations.load(chat_id).path.read_text())
        files = saved["messages"][0]["attachments"]
        assert files[0]["name"] == "notes.txt" and "Line 39:" in files[0]["text"]
        assert saved["messages"][0]["stats"]["attachment_tokens"] == [tokens]

        reopened = real_app(real_factory, conversation=conversations.load(chat_id))
        async with reopened.run_test(size=SIZE) as pilot:  # --continue: the chat whole
            await ready(pilot, timeout=90)
            assert f"❐ notes.txt · {tokens:,} tokens" in screen_text(reopened)
            assert reopened.conversation.engine_messages()[0].attachments[0].name == "notes.txt"
            await send(pilot, "And on line 4?")
            await answered(pilot, timeout=60)
            assert reopened.conversation.messages[-1].stats["prompt_length"] > tokens

    run(scenario())


@pytest.mark.slow
def test_a_pasted_path_offers_the_file_and_a_chip_comes_off(real_factory, tmp_path):
    path = notes(tmp_path, 60, "long notes.txt")

    async def scenario():
        app = real_app(real_factory)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot, timeout=90)
            prompt = app.query_one(PromptInput)
            prompt.load_text("Summarise ")
            prompt.move_cursor(prompt.document.end)
            await paste(pilot, f"'{path}'")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the offer")
            await pilot.press("n")  # declined: the paste is text after all
            await wait_for(pilot, lambda: prompt.text == f"Summarise '{path}'", 5, "the text")
            assert not chips(app)

            prompt.load_text("")
            await paste(pilot, "file://" + quote(str(path)))
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the offer")
            await pilot.press("y")
            await wait_for(pilot, lambda: chips(app), 10, "the chip")
            assert prompt.text == "" and "long notes.txt" in chips(app)[0]
            reading = app.chat.files.reading
            await pilot.click(Chip)  # a click takes it off, and stops its reading
            await wait_for(pilot, lambda: not chips(app), 5, "the chip to go")
            assert reading is not None and reading.cancelled
            await wait_for(pilot, lambda: reading.done.is_set(), 30, "the read-ahead to stop")
            assert not status_text(app).startswith("Reading")

            await paste(pilot, str(path))
            await pilot.press("y")
            await wait_for(pilot, lambda: app.chat.files.reading is not None
                           and app.chat.files.reading.progress is not None, 30, "the reading")
            await pilot.pause(0.3)
            assert "Reading long notes.txt" in status_text(app)  # as a long prompt is
            assert "reading" in chips(app)[0]
            await pilot.press("escape")  # Esc stops the reading: Enter reads the file
            await wait_for(pilot, lambda: app.chat.files.pending[0].state == "stopped", 30,
                           "the reading to stop")
            assert "Enter reads it" in chips(app)[0]
            prompt.focus()
            await pilot.press("backspace")  # in an empty input: the last chip goes
            await wait_for(pilot, lambda: not chips(app), 5, "the chip to go")
            assert app.chat.files.last.done.wait(30)
            await send(pilot, "Hello")  # the engine is free for an answer
            await answered(pilot, timeout=60)
            assert app.conversation.messages[-2].attachments == ()

    run(scenario())


@pytest.mark.slow
def test_a_refused_file_is_one_line_and_the_typed_text_stays(real_factory, tmp_path):
    binary = tmp_path / "data.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    empty = tmp_path / "empty.txt"
    empty.write_text("")

    async def scenario():
        app = real_app(real_factory)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot, timeout=90)
            prompt = app.query_one(PromptInput)
            prompt.load_text("my draft question")
            await attach_by_key(pilot, tmp_path)  # a folder
            await paste(pilot, str(binary))
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the offer")
            await pilot.press("y")
            await attach_by_key(pilot, empty)
            await wait_for(pilot, lambda: len(notices(app)) >= 3, 10, "three refusals")
            lines = notices(app)[-3:]
            assert all("\n" not in line for line in lines), lines
            assert "folder" in lines[0] and tmp_path.name in lines[0]
            assert lines[1].startswith("data.bin") and lines[2].startswith("empty.txt")
            assert prompt.text == "my draft question" and not chips(app)
            await pilot.press("ctrl+o")  # the dialog offers the path refused last
            await wait_for(pilot, lambda: isinstance(app.screen, AttachScreen), 5, "the dialog")
            assert app.screen.query_one(Input).value == str(empty)
            await pilot.press("escape")

    run(scenario())


@pytest.mark.slow
def test_enter_while_the_file_is_read_ahead_the_answer_streams(real_factory, tmp_path):
    path = notes(tmp_path, 80)
    states: list[str] = []

    async def scenario():
        app = real_app(real_factory)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot, timeout=90)
            await attach_by_key(pilot, path)
            await wait_for(pilot, lambda: app.chat.files.reading is not None
                           and app.chat.files.reading.started, 30, "the reading to begin")
            reading = app.chat.files.reading
            await send(pilot, "What did the keeper count on line 2?")
            while app.stream is not None:
                states.append(status_text(app))
                await pilot.pause(0.1)
            await answered(pilot, timeout=60)
            assert reading.done.is_set()
            assert any(s.startswith("Reading") for s in states), states[:5]
            question, answer = app.conversation.messages[-2:]
            assert question.attachments and answer.content.strip() and not answer.interrupted
            assert answer.stats["prompt_length"] > 1000  # the file was in the prompt

    run(scenario())


@pytest.mark.slow
def test_files_over_the_context_say_so_and_the_answer_names_its_sources(real_factory, tmp_path):
    path = notes(tmp_path, 260, "logbook.txt")

    async def scenario():
        app = real_app(real_factory)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot, timeout=90)
            await attach_by_key(pilot, path)
            await wait_for(pilot, lambda: app.query_one(ChipBar).note, 10, "the note")
            assert "passages" in app.query_one(ChipBar).note  # said before Enter
            assert "passages" in screen_text(app)
            await wait_for(pilot, lambda: app.chat.files.pending[0].state == "too long", 30,
                           "the read-ahead to say it does not fit")
            await send(pilot, "How many gulls did the keeper count on line 120?")
            await answered(pilot, timeout=120)
            answer = app.conversation.messages[-1]
            assert answer.stats.get("retrieval") and answer.stats.get("sources"), answer.stats
            figures = str(app.query("AnswerView .figures").last().render())
            assert "sources: logbook.txt" in figures

    run(scenario())
