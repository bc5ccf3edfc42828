"""The chat in a real terminal (tmux): what the model wrote keeps its lines once the answer
ends, no blank rows trail a streaming answer, and the status bar fits an 80- and a 120-column
terminal while a prompt is read (the real CLI on the starter)."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from support import terminal
from support.terminal import Tmux
from support.uitools import blank_rows_under_the_text
from test_ui_markdown import LIST_AND_VERSE

from pocketchat.paths import settings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

REPO = Path(__file__).resolve().parents[1]
WIDTHS = [80, 120]
FIGURES = re.compile(r"\d+ tokens · \d+\.\d tok/s")  # an answer's line once it ended


def answer_rows(screen: str) -> list[str]:
    """The screen's rows as a reader sees them (the message border and the scrollbar left out)."""
    return [line.strip(" █▌▐▁▂▃▄▅▆▇▔") for line in screen.splitlines()]


def scripted_chat(tmp_path: Path, text: str, size: tuple[int, int], delay: float = 0.05) -> tuple[Tmux, Path]:
    """The real chat app in a tmux pane, on a scripted engine whose answer is `text`."""
    return terminal.scripted_chat(tmp_path, {"text": text, "delay": delay}, size)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_verse_and_a_numbered_list_keep_their_lines_in_a_real_terminal(tmp_path, width):
    tmux, exit_file = scripted_chat(tmp_path, LIST_AND_VERSE, (width, 30))
    try:
        tmux.wait_for(lambda s: "Ready" in s and "Ask anything" in s, 60, "the chat to open")
        tmux("send-keys", "-t", "e2e", "-l", "A list and a verse, please.")
        tmux("send-keys", "-t", "e2e", "Enter")
        streaming: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a few readings while it streams (~1.5 s)
            screen = tmux.screen()
            if FIGURES.search(screen):
                break
            if "Three things" in screen:
                streaming.append(screen)
            time.sleep(0.1)
        done = tmux.wait_for(lambda s: FIGURES.search(s), 30, "the answer to end")
        rows = answer_rows(done)
        for line in LIST_AND_VERSE.splitlines():
            if line[:2] in ("1.", "2.", "3."):
                assert any(row.endswith(line[3:]) and line[:2] in row for row in rows), done
            elif line:
                assert line in rows, f"{line!r} is not a row of its own:\n{done}"
        assert blank_rows_under_the_text(done) == 0, done
        assert streaming, "no reading while the answer streamed"
        worst = max(streaming, key=blank_rows_under_the_text)
        assert blank_rows_under_the_text(worst) == 0, worst
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
    finally:
        tmux.kill()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_status_bar_fits_a_real_terminal_while_the_starter_reads_a_prompt(tmp_path, width):
    text_file = tmp_path / "long.txt"
    text_file.write_text(" ".join(f"item{i}" for i in range(1030)) + "\nSay one word.")
    progress = re.compile(r"Reading the prompt ([\d,]+)/([\d,]+) tokens")
    with terminal.starter_chat(tmp_path, "--ctx 8192", size=(width, 24)) as (tmux, exit_file):
        tmux("load-buffer", "-b", "long", str(text_file))
        tmux("paste-buffer", "-p", "-b", "long", "-t", "e2e")
        tmux.wait_for(lambda s: "Say one word." in s, 30, "the paste")
        tmux("send-keys", "-t", "e2e", "Enter")
        screen = tmux.wait_for(lambda s: (m := progress.search(s)) and m.group(1) != "0", 90,
                               "a piece of the prompt read")
        status = next(line for line in screen.splitlines() if progress.search(line))
        assert re.search(r"ctx \d+/8192", status), status  # the context is on the bar too
        assert len(status.rstrip()) < width, status  # nothing reaches the last column: not cut
        if width >= 120:
            assert re.search(r"· [\d.]+ (s|ms|min \d+ s) left", status) and "mem " in status, status
        print(f"{width} columns: {status.strip()}")
        tmux("send-keys", "-t", "e2e", "Escape")
        tmux.wait_for(lambda s: "Stopped" in s and not progress.search(s), 20, "Esc to stop it")
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()


def test_the_starters_answer_keeps_the_lines_it_wrote(tmp_path):
    """Whatever the starter writes, each line of its answer (as saved) starts a row on screen
    once the answer ended: lines are not joined into paragraphs."""
    with terminal.starter_chat(tmp_path, size=(120, 60)) as (tmux, exit_file):
        tmux("send-keys", "-t", "e2e", "-l", "Write a short poem of four lines about the sea.")
        tmux("send-keys", "-t", "e2e", "Enter")
        try:
            done = tmux.wait_for(lambda s: FIGURES.search(s), 120, "the answer to end")
        except AssertionError:
            tmux("send-keys", "-t", "e2e", "Escape")  # a rambling answer: stop it, keep what it wrote
            done = tmux.wait_for(lambda s: "interrupted" in s, 30, "the answer to stop")
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
    saved = json.loads(next(settings().conversations_dir.glob("*.json")).read_text())
    answer = saved["messages"][-1]["content"]
    lines = [line.strip() for line in answer.splitlines() if line.strip()]
    plain = [line for line in lines if re.fullmatch(r"[A-Za-z][\w ,.;:'!?-]{8,}", line)]
    if len(plain) < 2:
        pytest.skip(f"the starter wrote no two plain lines this time: {answer!r}")
    rows = answer_rows(done)
    shown = [line for line in plain if any(row.startswith(line[:40]) for row in rows)]
    assert len(shown) == len(plain), f"lines joined on screen: {set(plain) - set(shown)}\n{done}"
