"""The real chat on the starter in tmux: a busy program starts mid-answer, and the status bar
says the CPU threads moved and why (issue #34)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from support.terminal import starter_chat

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: the plan has one thread"),
]

MOVED = re.compile(r"(\d+) of (\d+) threads: the machine is busy")
BUSY = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def rate(screen: str) -> float:
    """The status bar's decode rate (0.0: none shown)."""
    for line in reversed(screen.splitlines()):
        found = re.findall(r"(\d+\.\d) tok/s", line)
        if found and any(w in line for w in ("Answering", "Stopped", "Ready")):
            return float(found[-1])
    return 0.0


def collapsed(screen: str, before: float) -> bool:
    """Whether the rate fell to a third of `before` or less (a collapse is 3-10x)."""
    return rate(screen) <= before / 3


def test_a_busy_program_mid_answer_shows_in_the_status_bar(tmp_path):
    """On a quiet machine the threads move and the status bar says why. Where other programs
    kept the cores busy before (a loaded CI machine) one more may not collapse decoding: then
    the rate must have held (a collapse without a word fails either way)."""
    import psutil

    with starter_chat(tmp_path, size=(160, 34)) as (tmux, _):
        busy: list[subprocess.Popen] = []
        others = round(psutil.cpu_percent(interval=1.0) * (os.cpu_count() or 1) / 100)
        try:
            for attempt in range(3):  # the starter may end an answer before the move shows
                tmux("send-keys", "-t", "e2e", "-l",
                     f"Write a very long story about a lighthouse keeper, part {attempt + 1}.")
                tmux("send-keys", "-t", "e2e", "Enter")
                screen = tmux.wait_for(lambda s: re.search(r"\d+\.\d tok/s", s) and "Answering" in s,
                                       60, "the answer to stream")
                before = rate(screen)
                if not busy:  # as many busy loops as the cores the others leave, and one
                    # more for each core other programs kept busy before (a loaded CI machine)
                    n = max(1, (os.cpu_count() or 2) - 1) + others
                    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]
                try:
                    screen = tmux.wait_for(lambda s: MOVED.search(s), 20, "the threads to move")
                    break
                except AssertionError:
                    if others and not collapsed(tmux.screen(), before):
                        return  # a machine busy all along: one more program did not collapse it
                    tmux("send-keys", "-t", "e2e", "Escape")  # stop it: the next one tries again
                    tmux.wait_for(lambda s: "Ready" in s or "Stopped" in s, 60,
                                  "the answer to stop")
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
