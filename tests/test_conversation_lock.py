"""One conversation, two windows: nothing either writes is lost.

A chat holds the conversation it shows; a second pocketchat opening it (`--continue` twice, or
the list) works in a copy and says so. Where two writers meet anyway, the second save becomes
a copy instead of writing over the other's turns.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pocketchat import conversations, filehold
from pocketchat.conversations import Conversation
from pocketchat.paths import settings

REPO = Path(__file__).resolve().parents[1]

HOLDER = """
import sys, time
from pocketchat import conversations
c = conversations.load(sys.argv[1])
held = conversations.hold(c)
assert isinstance(held, conversations.Hold), held
print("held", flush=True)
time.sleep(120)
"""


def _saved(text: str = "first question") -> Conversation:
    chat = Conversation()
    chat.add("user", text)
    chat.add("assistant", "first answer")
    chat.save()
    return chat


def _all_user_turns() -> list[str]:
    turns = []
    for path in settings().conversations_dir.glob("*.json"):
        data = json.loads(path.read_text())
        turns += [m["content"] for m in data["messages"] if m["role"] == "user"]
    return turns


def test_a_conversation_held_by_another_process_is_refused_with_its_pid_and_freed_when_it_dies():
    chat = _saved()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(chat.path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline().strip() == "held"
        assert conversations.hold(chat) == proc.pid  # not ours: the holder's pid to tell the user
    finally:
        proc.send_signal(signal.SIGKILL)  # killed: nothing stale may stay behind
        proc.wait(10)
    held = conversations.hold(chat)
    assert isinstance(held, conversations.Hold)
    held.release()


FORKING_HOLDER = """
import os, sys, time
from pocketchat import conversations
c = conversations.load(sys.argv[1])
held = conversations.hold(c)
assert isinstance(held, conversations.Hold), held
if os.fork() == 0:  # a process it started keeps the lock's open file; the holder itself ends
    print(os.getpid(), flush=True)
    time.sleep(120)
os._exit(0)
"""


@pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/fd").is_dir(),
                    reason="needs fork and /proc")
def test_the_lock_message_names_the_live_holder_never_a_process_that_is_gone():
    """The pid written in the lock file is its first holder's; when that process is
    gone but a process it forked still has the file open (and so the lock), the message named
    the dead one."""
    from pocketchat.ui.holding import Holding

    chat = _saved()
    proc = subprocess.Popen([sys.executable, "-c", FORKING_HOLDER, str(chat.path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    child = int(proc.stdout.readline())
    try:
        proc.wait(10)  # the process that wrote its pid into the lock file has ended
        assert (settings().conversations_dir / conversations.LOCKS / f"{chat.id}.lock").read_text() \
            == str(proc.pid)
        assert conversations.hold(chat) == child
        shown, note = Holding().take(chat)
        assert shown.id != chat.id and f"(process {child})" in note, note
        assert str(proc.pid) not in note
    finally:
        os.kill(child, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not isinstance(held := conversations.hold(chat), conversations.Hold):
        assert time.monotonic() < deadline, held
        time.sleep(0.1)
    held.release()


def test_a_recorded_pid_that_is_gone_is_not_named_where_the_openers_are_unknown(monkeypatch, tmp_path):
    """Without /proc (macOS, BSD): the recorded pid only when that process is alive."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    monkeypatch.setattr(filehold, "_openers", lambda path: None)
    assert conversations.holder(tmp_path / "x.lock", gone.pid) == 0
    assert conversations.holder(tmp_path / "x.lock", os.getpid()) == os.getpid()
    assert conversations.holder(tmp_path / "x.lock", 0) == 0


def test_the_same_process_holds_once_and_a_copy_is_free_to_hold():
    chat = _saved()
    first = conversations.hold(chat)
    assert isinstance(first, conversations.Hold)
    assert conversations.hold(conversations.load(chat.id)) == os.getpid()
    copy = chat.copy()
    assert copy.id != chat.id and copy.forked_from == chat.id
    assert [m.content for m in copy.messages] == [m.content for m in chat.messages]
    assert isinstance(conversations.hold(copy), conversations.Hold)
    first.release()
    assert isinstance(conversations.hold(chat), conversations.Hold)


def test_two_writers_of_one_file_both_keep_their_turns():
    chat = _saved()
    mine, theirs = conversations.load(chat.id), conversations.load(chat.id)
    mine.add("user", "turn written in window one")
    mine.save()
    theirs.add("user", "turn written in window two")
    theirs.save()  # the file changed since `theirs` read it: saved as a copy
    assert theirs.forked_from == chat.id and theirs.id != chat.id
    turns = _all_user_turns()
    assert "turn written in window one" in turns and "turn written in window two" in turns
    theirs.add("user", "a later turn in window two")
    theirs.save()  # its own file now: written in place, no further copy
    assert len(list(settings().conversations_dir.glob("*.json"))) == 2


def test_a_chat_never_saved_leaves_no_lock_file():
    chat = Conversation()
    held = conversations.hold(chat)
    assert isinstance(held, conversations.Hold)
    held.release(forget=not chat.path.exists())
    assert not list((settings().conversations_dir / conversations.LOCKS).glob("*.lock"))


def _answered(text: str) -> bool:
    for path in settings().conversations_dir.glob("*.json"):
        try:
            messages = json.loads(path.read_text())["messages"]
        except (OSError, ValueError):
            continue  # being replaced
        for asked, answer in zip(messages, messages[1:], strict=False):
            if asked["content"] == text and answer["role"] == "assistant" \
                    and not answer["interrupted"]:
                return True
    return False


def _wait_answered(text: str, timeout: float, tmux=None) -> None:
    deadline = time.monotonic() + timeout
    while not _answered(text):
        assert time.monotonic() < deadline, \
            f"no saved answer to {text!r}; its window shows:\n{tmux.screen() if tmux else ''}"
        time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_continue_in_two_terminals_keeps_both_windows_turns(tmp_path):
    """The issue's case: `pocketchat --continue` twice, a message in each, both quit."""
    pytest.importorskip("llama_cpp")
    from support import terminal
    from support.terminal import Tmux

    original = _saved("the question asked before")
    windows = []
    try:
        for name in ("one", "two"):
            folder = tmp_path / name
            folder.mkdir()
            command, exit_file = terminal.command(folder, "--model starter --continue --no-think")
            tmux = Tmux()
            tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
            tmux.wait_for(terminal.ready, 90, f"window {name} to load the starter model")
            windows.append((tmux, exit_file))
        one, two = windows[0][0], windows[1][0]
        screen = two.wait_for(lambda s: "open in another" in s, 10, "the second window's note")
        assert "copy" in screen, screen
        for tmux, text in ((one, "hello from window one"), (two, "hello from window two")):
            tmux("send-keys", "-t", "e2e", "-l", text)
            tmux.wait_for(lambda s, t=text: t in s, 10, f"{text!r} typed")
            tmux("send-keys", "-t", "e2e", "Enter")
        for tmux, text in ((one, "hello from window one"), (two, "hello from window two")):
            _wait_answered(text, 90, tmux)
        for tmux, _ in windows:
            tmux("send-keys", "-t", "e2e", "C-q")
        for tmux, exit_file in windows:
            assert terminal.wait_file(exit_file, 30), tmux.screen()
    finally:
        for tmux, _ in windows:
            tmux.kill()
    kept = json.loads(original.path.read_text())
    assert [m["content"] for m in kept["messages"] if m["role"] == "user"] == [
        "the question asked before", "hello from window one"]
    turns = _all_user_turns()
    assert "hello from window two" in turns and turns.count("the question asked before") == 2
