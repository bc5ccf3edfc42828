"""A file in the real `pocketchat --model starter` in a real terminal (tmux): Ctrl+O attaches
it, its chip and its reading show, a dropped (pasted) path is offered, the question is sent
and the answer streams; the saved chat holds the file."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from support.terminal import starter_chat, wait_file

from pocketchat.paths import settings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_attach_a_file_see_it_read_and_ask_about_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("\n".join(f"Line {i}: the lighthouse keeper counted {i * 7} gulls on the "
                              "northern rock." for i in range(80)) + "\n")
    dropped = tmp_path / "other file.md"
    dropped.write_text("# Other\n\nNothing to see.\n")
    with starter_chat(tmp_path) as (tmux, exit_file):
        tmux("send-keys", "-t", "e2e", "C-o")
        tmux.wait_for(lambda s: "Attach a file" in s, 10, "the attach dialog")
        tmux("send-keys", "-t", "e2e", "-l", str(path))
        tmux("send-keys", "-t", "e2e", "Enter")
        reading = tmux.wait_for(lambda s: "❐ notes.txt" in s and "Reading notes.txt" in s, 30,
                                "the chip and the file being read")
        assert re.search(r"❐ notes\.txt · ~?[\d,.k]+ tokens", reading), reading
        done = tmux.wait_for(lambda s: re.search(r"❐ notes\.txt · [\d,]+ tokens · read", s), 60,
                             "the file read ahead")
        assert "Ready" in done

        # A file dropped on the terminal pastes its path (quoted): the chat offers it.
        tmux("set-buffer", "-b", "drop", f"'{dropped}'")
        tmux("paste-buffer", "-p", "-b", "drop", "-t", "e2e")
        tmux.wait_for(lambda s: "Attach other file.md?" in s, 10, "the offer to attach it")
        tmux("send-keys", "-t", "e2e", "n")  # declined: the path is pasted as text
        tmux.wait_for(lambda s: f"'{dropped}'" in s, 10, "the path kept in the input")
        tmux("send-keys", "-t", "e2e", "C-u")

        tmux("send-keys", "-t", "e2e", "-l", "What did the keeper count on line 3?")
        tmux("send-keys", "-t", "e2e", "Enter")
        answered = tmux.wait_for(lambda s: re.search(r"\d+ tokens · \d+\.\d tok/s · TTFT", s), 60,
                                 "the answer to stream and end")
        turn = answered.split("❐ notes.txt", 1)[1]
        assert "What did the keeper count on line 3?" in turn
        assert "Line 3:" not in answered  # the file's text is not shown, its name is
        tmux("send-keys", "-t", "e2e", "C-q")
        assert wait_file(exit_file, 30) and exit_file.read_text().strip() == "0"
    saved = [json.loads(p.read_text()) for p in settings().conversations_dir.glob("*.json")]
    assert len(saved) == 1
    first = saved[0]["messages"][0]
    assert first["attachments"][0]["name"] == "notes.txt" and "Line 79:" in first["attachments"][0]["text"]


def test_a_dropped_pdf_on_the_tiny_qwen35moe_is_read_asked_and_reopened(tmp_path):
    """POCKET's architecture and its real Qwen3.6 template: a PDF (made here) dropped on the
    terminal is attached, read ahead, asked about; `--continue` reopens the chat with it."""
    pytest.importorskip("llama_cpp")
    from support import tinyqwen35
    from support.pdfmake import write_pdf
    from support.terminal import Tmux, command, ready

    model = tinyqwen35.write_tiny_qwen35moe(tmp_path / "q36.gguf",
                                            chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE)
    pdf = write_pdf(tmp_path / "paper.pdf", [[f"Page one line {i}: bees visit clover."
                                              for i in range(20)],
                                             ["Page two: the hive holds 40,000 bees."] * 20])
    for resume in ("", "--continue "):
        line, exit_file = command(tmp_path, f"{resume}--model {model} --no-think --draft off")
        tmux = Tmux()
        try:
            tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", line)
            screen = tmux.wait_for(ready, 90, "the tiny model to load")
            if resume:
                tmux.wait_for(lambda s: "❐ paper.pdf" in s, 20, "the reopened turn with its file")
                tmux("send-keys", "-t", "e2e", "C-q")
                assert wait_file(exit_file, 30) and exit_file.read_text().strip() == "0"
                break
            tmux("set-buffer", "-b", "drop", f"'{pdf}'")
            tmux("paste-buffer", "-p", "-b", "drop", "-t", "e2e")
            tmux.wait_for(lambda s: "Attach paper.pdf?" in s, 10, "the offer to attach it")
            tmux("send-keys", "-t", "e2e", "y")
            tmux.wait_for(lambda s: re.search(r"❐ paper\.pdf · 2 pages · [\d,]+ tokens · read", s), 60,
                          "the PDF read ahead")
            tmux("send-keys", "-t", "e2e", "-l", "How many bees does the hive hold?")
            tmux("send-keys", "-t", "e2e", "Enter")
            screen = tmux.wait_for(lambda s: re.search(r"\d+ tokens · \d+\.\d tok/s · TTFT", s),
                                   60, "the answer to stream and end")
            assert "Page two:" not in screen.split("How many bees")[0]  # the name, not the text
            tmux("send-keys", "-t", "e2e", "C-q")
            assert wait_file(exit_file, 30) and exit_file.read_text().strip() == "0"
            exit_file.unlink()
        finally:
            tmux.kill()
    saved = [json.loads(p.read_text()) for p in settings().conversations_dir.glob("*.json")]
    files = saved[0]["messages"][0]["attachments"]
    assert files[0]["kind"] == "pdf" and files[0]["pages"] == 2
    assert "[page 2]\nPage two: the hive holds 40,000 bees." in files[0]["text"]
