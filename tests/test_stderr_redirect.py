"""In a real terminal (tmux): `pocketchat 2> err.log` draws the chat on the terminal,
not into the log; the log keeps what is printed outside the chat."""

from __future__ import annotations

import shutil
import time

import pytest
from support import terminal
from support.terminal import Tmux

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_the_chat_with_stderr_in_a_file_draws_on_the_terminal(tmp_path):
    pytest.importorskip("llama_cpp")
    log = tmp_path / "err.log"
    command, exit_file = terminal.command(tmp_path, f"--model starter --no-think 2> {log}")
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        screen = tmux.wait_for(terminal.ready, 90, "the chat on the terminal")
        assert "Ask anything" in screen
        tmux("send-keys", "-t", "e2e", "-l", "Say hi.")
        tmux("send-keys", "-t", "e2e", "Enter")
        tmux.wait_for(lambda s: "Say hi." in s and terminal.ready(s) and "tok/s" in s, 90, "the answer")
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
        deadline = time.monotonic() + 10
        while not exit_file.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)  # created by the shell's redirect an instant before it is written
        assert exit_file.read_text().strip() == "0"
    finally:
        tmux.kill()
    drawn = log.read_bytes()
    assert b"\x1b[" not in drawn and b"Ask anything" not in drawn, drawn[:500]


def test_without_a_controlling_terminal_the_chat_refuses_in_one_line(tmp_path):
    """stdin and stdout a terminal (a pty) but no controlling terminal (a new session) and
    stderr in a file: nowhere to draw, one error line in the file."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    master, slave = os.openpty()
    log = tmp_path / "err.log"
    with open(log, "wb") as err:
        done = subprocess.run([sys.executable, "-m", "pocketchat", "--model", "starter"], stdin=slave,
                              stdout=slave, stderr=err, start_new_session=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1"})
    os.close(slave)
    os.close(master)
    text = log.read_text()
    assert done.returncode == 1, text
    assert text.startswith("error: the chat draws on the terminal, and this process has none"), text
    assert "\x1b[" not in text and "Traceback" not in text


def test_ctrl_c_in_a_real_terminal_stops_the_answer_then_quits(tmp_path):
    pytest.importorskip("llama_cpp")
    command, exit_file = terminal.command(tmp_path, "--model starter --no-think --bench-tokens 3000")
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        tmux.wait_for(terminal.ready, 90, "the starter model to load")
        tmux("send-keys", "-t", "e2e", "-l", "Tell a long story.")
        tmux("send-keys", "-t", "e2e", "Enter")
        tmux.wait_for(lambda s: "Answering" in s, 60, "the answer under way")
        tmux("send-keys", "-t", "e2e", "C-c")
        tmux.wait_for(lambda s: "Stopped" in s and "interrupted" in s, 30, "the answer to stop")
        assert not exit_file.exists()  # the chat is still open
        tmux("send-keys", "-t", "e2e", "C-c")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
        deadline = time.monotonic() + 10
        while not exit_file.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert exit_file.read_text().strip() == "0"
    finally:
        tmux.kill()
