"""The real chat in tmux with its worker stopped (SIGSTOP) mid-answer: said on screen within
2 s, Esc returns control at once (the answer so far kept), Ctrl+R restarts at once, and the
conversation goes on."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time

import pytest

from support import terminal
from support.workerproc import state, worker_of
from pocketchat.paths import settings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

STREAMING = re.compile(r"Answering .*\d+\.\d tok/s")


def test_a_stopped_worker_is_said_esc_returns_control_and_restart_works(tmp_path):
    # --bench-tokens: every answer exactly N tokens, so it is still streaming when stopped
    with terminal.starter_chat(tmp_path, "--bench-tokens 3000 --ctx 4096") as (tmux, exit_file):
        chat_pid = int((tmp_path / "pid").read_text())
        tmux("send-keys", "-t", "e2e", "-l", "Tell me a story about a lighthouse.")
        tmux("send-keys", "-t", "e2e", "Enter")
        tmux.wait_for(lambda s: STREAMING.search(s), 60, "the answer to stream")
        worker = worker_of(chat_pid)
        os.kill(worker, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            screen = tmux.wait_for(lambda s: "The model process is not responding" in s, 3,
                                   "the chat to say so")
            said = time.monotonic() - stopped
            print(f"on screen {said:.2f} s after SIGSTOP")
            assert said < 2.0, screen
            assert "Not responding · Ctrl+R restarts" in screen  # the status bar
            assert "Ctrl+R restarts it" in screen  # the notice's hint
            assert "memory" not in screen.lower()

            tmux("send-keys", "-t", "e2e", "Escape")
            pressed = time.monotonic()
            screen = tmux.wait_for(lambda s: "interrupted" in s, 3, "Esc to end the answer")
            ended = time.monotonic() - pressed
            print(f"the answer ended {ended:.2f} s after Esc")
            assert ended < 1.0, screen
            assert state(worker) == "stopped"  # the UI let it go; the worker was not waited for

            tmux("send-keys", "-t", "e2e", "-l", "Are you there?")  # control is back: it types,
            tmux.wait_for(lambda s: "Are you there?" in s, 3, "the typed text")
            tmux("send-keys", "-t", "e2e", "Enter")  # and a send is refused, the text kept
            time.sleep(0.5)  # (the saved conversation below has no turn for it)

            tmux("send-keys", "-t", "e2e", "C-r")
            pressed = time.monotonic()
            tmux.wait_for(lambda s: state(worker) in ("gone", "zombie"), 3, "the stuck worker to end")
            print(f"the stuck worker ended {time.monotonic() - pressed:.2f} s after Ctrl+R")
            assert time.monotonic() - pressed < 2.0
            screen = tmux.wait_for(lambda s: terminal.ready(s) and "not responding" not in
                                   s.split("\n", 1)[0], 60, "the restarted model")
        finally:
            try:
                os.kill(worker, signal.SIGCONT)
            except OSError:
                pass
        assert "lighthouse" in screen  # the conversation is still on screen
        new_worker = worker_of(chat_pid)
        assert new_worker != worker

        tmux("send-keys", "-t", "e2e", "Enter")  # the kept draft goes to the new worker
        tmux.wait_for(lambda s: STREAMING.search(s), 60, "the next answer to stream")
        tmux("send-keys", "-t", "e2e", "Escape")
        tmux.wait_for(lambda s: s.count("interrupted") >= 2, 10, "the second answer to stop")
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
        assert exit_file.read_text().strip() == "0"
    saved = [json.loads(p.read_text()) for p in settings().conversations_dir.glob("*.json")]
    assert len(saved) == 1, saved
    messages = saved[0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "lighthouse" in messages[0]["content"] and messages[1]["content"].strip()
    assert messages[2]["content"] == "Are you there?"
