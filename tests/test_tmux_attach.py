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
