"""Saved conversations: atomic JSON files that survive crashes, corrupt files, and kill -9."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pocketchat import conversations
from pocketchat.conversations import Autosave, Conversation
from pocketchat.paths import settings
from pocketchat.engines.types import Stats

TESTS = Path(__file__).parent


def _chat(title: str = "What is a MoE model?") -> Conversation:
    c = Conversation(model="Scripted-1B", system="Be brief.")
    c.add("user", title)
    c.add("assistant", "A mixture of experts.", thinking="They asked about MoE.",
          stats=conversations.stats_summary(Stats(generated_tokens=5, decode_seconds=0.5)))
    return c


def test_save_and_load_round_trip_under_the_data_dir():
    c = _chat()
    path = c.save()
    assert path.parent == settings().conversations_dir
    back = conversations.load(c.id)
    assert back.title == "What is a MoE model?"
    assert back.system == "Be brief."
    assert [(m.role, m.content, m.thinking) for m in back.messages] == [
        ("user", "What is a MoE model?", ""),
        ("assistant", "A mixture of experts.", "They asked about MoE."),
    ]
    assert back.messages[1].stats["decode_tok_s"] == 10.0
    assert [m.content for m in back.engine_messages()] == [
        "Be brief.", "What is a MoE model?", "A mixture of experts."]


def test_writes_are_atomic_and_leave_no_temp_files(monkeypatch):
    c = _chat()
    c.save()
    before = c.path.read_text()

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    c.add("user", "second question")
    with pytest.raises(OSError):
        c.save()
    assert c.path.read_text() == before  # the old file is intact
    assert list(c.path.parent.iterdir()) == [c.path]  # and the temp file was removed


def test_an_empty_conversation_is_not_written():
    c = Conversation()
    c.save()
    assert not c.path.exists()
    assert conversations.last() is None


def test_list_is_newest_first_and_last_is_the_newest():
    old, new = _chat("old one"), _chat("new one")
    old.save()
    time.sleep(0.01)
    new.save()
    time.sleep(0.01)
    old.add("user", "touched again")
    old.save()
    assert [c.title for c in conversations.list_all()] == ["old one", "new one"]
    assert conversations.last().id == old.id


def test_a_corrupt_file_is_skipped_with_a_warning(caplog):
    good = _chat()
    good.save()
    folder = settings().conversations_dir
    (folder / "broken.json").write_text('{"id": "broken", "messages": [')
    (folder / "wrong.json").write_text('{"id": "x", "messages": [{"role": "robot"}]}')
    (folder / "list.json").write_text("[1, 2]")
    with caplog.at_level(logging.WARNING):
        found, skipped = conversations.scan()
    assert [c.id for c in found] == [good.id]
    assert sorted(p.name for p, _ in skipped) == ["broken.json", "list.json", "wrong.json"]
    assert "broken.json" in caplog.text
    assert conversations.last().id == good.id


def test_autosave_is_rate_bounded():
    c = _chat()
    saver = Autosave(c, interval=10.0)
    assert saver.touch() is True  # the first one saves
    for _ in range(100):
        c.messages[-1].content += " more"
        saver.touch()
    assert saver.saves == 1
    saver.flush()
    assert conversations.load(c.id).messages[-1].content.endswith("more")


def test_title_is_one_short_line():
    c = Conversation()
    c.add("user", "line one\nline two " + "x" * 200)
    assert "\n" not in c.title and len(c.title) <= conversations.TITLE_LENGTH
    assert c.title.startswith("line one line two")


KILLED_CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    from support.scripted_engine import Reply, ScriptedEngine
    from pocketchat.conversations import Conversation
    from pocketchat.engines.types import ChatOptions
    from pocketchat.ui.streaming import AnswerStream

    words = " ".join(f"word{{i}}" for i in range(10000))
    engine = ScriptedEngine([Reply(words)], delay=0.002)
    c = Conversation(model="Scripted-1B")
    c.add("user", "count for me")
    msg = c.add("assistant")
    print(c.path, flush=True)
    AnswerStream(engine, c, msg, c.engine_messages(), ChatOptions(), save_interval=0.2).run()
    """
)


def test_kill_9_mid_answer_keeps_the_answer_so_far_marked_interrupted():
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD.format(tests=str(TESTS))],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        path = Path(child.stdout.readline().strip())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if path.exists() and "word300" in path.read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the streaming child never saved 300 words")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    data = json.loads(path.read_text())  # never a torn file
    answer = data["messages"][-1]
    assert answer["role"] == "assistant"
    assert answer["interrupted"] is True
    assert answer["content"].startswith("word0 word1 word2")
    assert "word300" in answer["content"] and "word9999" not in answer["content"]
    assert conversations.last().messages[-1].interrupted
