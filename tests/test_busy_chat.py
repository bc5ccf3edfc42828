"""The real chat on the starter in tmux: a busy program starts mid-answer, and the status bar
says the CPU threads moved and why (issue #34)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from support.terminal import starter_chat

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: the plan has one thread"),
]

MOVED = re.compile(r"(\d+) of (\d+) threads: the machine is busy")
BUSY = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def test_a_busy_program_mid_answer_shows_in_the_status_bar(tmp_path):
    with starter_chat(tmp_path, size=(160, 34)) as (tmux, _):
        busy: list[subprocess.Popen] = []
        try:
            for attempt in range(3):  # the starter may end an answer before the move shows
                tmux("send-keys", "-t", "e2e", "-l",
                     f"Write a very long story about a lighthouse keeper, part {attempt + 1}.")
                tmux("send-keys", "-t", "e2e", "Enter")
                tmux.wait_for(lambda s: re.search(r"\d+\.\d tok/s", s) and "Answering" in s,
                              60, "the answer to stream")
                if not busy:  # as many busy loops as the cores the others leave: one each
                    busy = [subprocess.Popen([sys.executable, "-c", BUSY])
                            for _ in range(max(1, (os.cpu_count() or 2) - 1))]
                try:
                    screen = tmux.wait_for(lambda s: MOVED.search(s), 20, "the threads to move")
                    break
                except AssertionError:
                    tmux.wait_for(lambda s: "Ready" in s or "Stopped" in s, 120,
                                  "the answer to end")
            else:
                raise AssertionError(f"the status bar never said the threads moved:\n"
                                     f"{tmux.screen()}")
            moved = MOVED.search(screen)
            assert int(moved.group(1)) < int(moved.group(2))
            status = [line for line in screen.splitlines() if MOVED.search(line)][-1]
            assert "tok/s" in status  # in the status bar, beside the rate
        finally:
            for p in busy:
                p.kill()
                p.wait()
