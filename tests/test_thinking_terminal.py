"""Thinking in a real terminal (tmux) and on a pty: the chat app on a scripted thinking engine
(the thought folded with its tokens and seconds, Ctrl+T ends it within a token step and the
answer streams, Esc still stops), and the real CLI on the starter with `--think`."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import terminal
from support.terminal import Tmux, starter_chat, wait_file

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

REPO = Path(__file__).resolve().parents[1]
THOUGHT = " ".join(f"idea{i}" for i in range(400))  # 400 tokens at 0.05 s: 20 s of thought
ANSWER = "Blue light scatters more."
TITLE = re.compile(r"Thinking · (\d+) tokens · ([\d.]+) s")


def scripted_chat(tmp_path: Path, size=(100, 30)) -> tuple[Tmux, Path]:
    return terminal.scripted_chat(tmp_path, {"text": ANSWER, "thinking": THOUGHT, "delay": 0.05,
                                             "thinking_budget": 1000}, size)


def test_the_thought_streams_folded_and_ctrl_t_brings_the_answer_in_a_terminal(tmp_path):
    tmux, exit_file = scripted_chat(tmp_path)
    try:
        tmux.wait_for(lambda s: "Ready" in s and "^t Answer" in s, 60, "the chat and its Ctrl+T key")
        tmux("send-keys", "-t", "e2e", "-l", "Why is the sky blue?")
        tmux("send-keys", "-t", "e2e", "Enter")
        first = tmux.wait_for(lambda s: (m := TITLE.search(s)) and int(m.group(1)) >= 20, 30,
                              "the thought's title counting")
        later = tmux.wait_for(lambda s: (m := TITLE.search(s)) and int(m.group(1))
                              > int(TITLE.search(first).group(1)), 10, "the count going on")
        assert re.search(r"think \d+/1,000", later), later  # the status bar, against the budget
        assert "idea5 " not in later  # folded: the thought's words are not on screen
        pressed = time.monotonic()
        tmux("send-keys", "-t", "e2e", "C-t")
        done = tmux.wait_for(lambda s: ANSWER in s, 10, "the answer after Ctrl+T")
        waited = time.monotonic() - pressed
        assert waited < 3.0, waited  # a token step (0.05 s) plus the screen's pace, loaded machine
        assert "ended by you" in done, done
        tmux("send-keys", "-t", "e2e", "-l", "And at sunset?")
        tmux("send-keys", "-t", "e2e", "Enter")
        tmux.wait_for(lambda s: len(TITLE.findall(s)) >= 2, 30, "the second thought")
        tmux("send-keys", "-t", "e2e", "Escape")  # Esc still stops the answer
        tmux.wait_for(lambda s: "interrupted" in s, 15, "the answer stopped")
        tmux("send-keys", "-t", "e2e", "C-c")
        time.sleep(0.3)
        tmux("send-keys", "-t", "e2e", "C-c")  # idle: twice quits
        assert wait_file(exit_file, 20), tmux.screen()
        assert exit_file.read_text().strip() == "0"
    finally:
        tmux.kill()


def test_the_starter_chat_takes_think_and_hides_ctrl_t_for_a_model_that_does_not_think(tmp_path):
    with starter_chat(tmp_path, "--think 64") as (tmux, exit_file):
        screen = tmux.screen()
        assert "^t Answer" not in screen, screen  # SmolLM2 does not think
        tmux("send-keys", "-t", "e2e", "C-q")
        assert wait_file(exit_file, 30) and exit_file.read_text().strip() == "0"


def test_p_with_think_on_a_pty(tmp_path):
    pytest.importorskip("llama_cpp")
    if shutil.which("script") is None:
        pytest.skip("script(1) is not installed")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    run = [sys.executable, "-m", "pocketchat", "--model", "starter", "-p", "Name one colour.",
           "--think", "64"]
    out = subprocess.run(["script", "-qec", shlex.join(run), "/dev/null"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"[A-Za-z]{3,}", out.stdout.split("Model loaded")[-1]), out.stdout
    bad = subprocess.run(["script", "-qec", shlex.join(run[:-1] + ["lots"]), "/dev/null"], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "argument --think: --think takes" in bad.stdout, bad.stdout

