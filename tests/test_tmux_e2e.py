"""The real `pocketchat --model starter` in a real terminal (tmux): ask, see the answer, quit."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
from support.terminal import Tmux

from pocketchat.paths import settings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

REPO = Path(__file__).resolve().parents[1]
TOK_S = re.compile(r"(\d+\.\d) tok/s")


def _status_line(screen: str) -> str:
    lines = [line for line in screen.splitlines() if " tok/s " in line and "TTFT" in line]
    return lines[-1] if lines else ""


def _shown_speed(screen: str) -> float:
    match = TOK_S.search(_status_line(screen))
    return float(match.group(1)) if match else 0.0


def test_real_chat_in_a_terminal(tmp_path):
    pytest.importorskip("llama_cpp")
    exit_file = tmp_path / "exit-code"
    env = {
        var: os.environ[var]
        for var in ("POCKETCHAT_DATA_DIR", "POCKETCHAT_CACHE_DIR", "PYTHONPATH",
                    "HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "PATH", "HOME")
        if var in os.environ
    }
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), TERM="xterm-256color", COLORTERM="truecolor")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = (f"cd {shlex.quote(str(REPO))} && env -i {exports} "
               f"{shlex.quote(sys.executable)} -m pocketchat --model starter --no-think; "
               f"echo $? > {shlex.quote(str(exit_file))}; sleep 30")
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        tmux.wait_for(lambda s: "SmolLM2" in s and "Ask anything" in s and "Ready" in s,
                      90, "the starter model to load")
        tmux("send-keys", "-t", "e2e", "-l", "What is the capital of France? Answer in one sentence.")
        time.sleep(0.3)
        tmux("send-keys", "-t", "e2e", "Enter")
        streaming = tmux.wait_for(lambda s: _shown_speed(s) > 0, 60, "a tok/s figure")
        assert _shown_speed(streaming) > 0
        try:
            done = tmux.wait_for(lambda s: re.search(r"\d+ tokens · \d+\.\d tok/s", s),
                                 45, "the answer to finish")
        except AssertionError:
            tmux("send-keys", "-t", "e2e", "Escape")  # a rambling answer: stop it
            done = tmux.wait_for(lambda s: "interrupted" in s, 15, "the answer to stop")
        answer_lines = done.split("What is the capital of France?", 1)[1]
        assert re.search(r"[A-Za-z]{3,}", answer_lines.split("tokens ·")[0]), done
        assert _shown_speed(done) > 0
        tmux("send-keys", "-t", "e2e", "C-q")
        deadline = time.monotonic() + 30
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert exit_file.exists(), f"pocketchat did not exit; the screen:\n{tmux.screen()}"
        assert exit_file.read_text().strip() == "0"
        saved = list(settings().conversations_dir.glob("*.json"))
        assert len(saved) == 1 and "capital of France" in saved[0].read_text()
    finally:
        tmux.kill()
