"""Tools in the real terminal chat (tmux) on the tiny `qwen35moe` with POCKET's real Qwen3.6
template, against a real stdio MCP server (tests/support/mcp_server.py): the palette's "Use the
tool" forces the call (so the random model's call is well-formed), the call block and its
dialog appear, confirming runs it and its result comes back, refusing tells the model, Esc in
the dialog stops the loop; the calls are saved, `--continue` shows them, and the next message
is read without reading the chat again; a server that crashes is one line in the chat."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from support import REPO, tinyqwen35
from support.terminal import Tmux, command, ready, wait_file

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
SERVER = REPO / "tests" / "support" / "mcp_server.py"


def saved(home: Path) -> dict:
    files = list((home / "data" / "conversations").glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def wait_saved(home: Path, check, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            chat = saved(home)
            if check(chat):
                return chat
        except (AssertionError, ValueError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def use_tool(tmux: Tmux, name: str) -> None:
    tmux.wait_for(lambda s: "Ready" in s, 60, "the chat idle")
    tmux("send-keys", "-t", "e2e", "C-p")
    tmux.wait_for(lambda s: "Search for commands" in s or "New chat" in s, 10, "the palette")
    tmux("send-keys", "-t", "e2e", "-l", f"Use the tool {name}")
    tmux.wait_for(lambda s: f"Use the tool {name}" in s, 10, "the palette's tool command")
    tmux("send-keys", "-t", "e2e", "Enter")
    tmux.wait_for(lambda s: f"calls {name}" in s, 10, "the note that the next answer calls it")


def ask(tmux: Tmux, text: str) -> None:
    tmux("send-keys", "-t", "e2e", "-l", text)
    tmux.wait_for(lambda s: text in s, 10, "the message typed")
    tmux("send-keys", "-t", "e2e", "Enter")


def test_a_tool_call_confirmed_refused_and_stopped_in_the_terminal(tmp_path):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("mcp")
    model = tinyqwen35.write_tiny_qwen35moe(tmp_path / "q36.gguf", ascii_only=True,
                                            chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "calc": {"command": sys.executable, "args": [str(SERVER), "ok"]},
        "broken": {"command": sys.executable, "args": [str(SERVER), "crash"]}}}))
    env = {"POCKETCHAT_DATA_DIR": str(tmp_path / "data"),
           "POCKETCHAT_CACHE_DIR": str(tmp_path / "cache")}
    args = f"--model {model} --no-think --draft off --ctx 16384 --mcp {config}"
    line, exit_file = command(tmp_path, args, env)
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "120", "-y", "40", line)
        tmux.wait_for(ready, 90, "the chat to load")
        use_tool(tmux, "add")
        ask(tmux, "Add two numbers.")
        screen = tmux.wait_for(lambda s: "The model wants to run add" in s, 60, "the dialog")
        assert "server calc" in screen and '"a"' in screen, screen
        tmux("send-keys", "-t", "e2e", "o")  # once
        chat = wait_saved(tmp_path, lambda c: c["messages"][-1]["role"] == "assistant"
                          and any(m["role"] == "tool" for m in c["messages"])
                          and not c["messages"][-1]["interrupted"]
                          and c["messages"][-1] is not c["messages"][1], 90, "the answer after it")
        call = chat["messages"][1]["tool_calls"][0]
        args_of = json.loads(call["arguments"])
        result = next(m for m in chat["messages"] if m["role"] == "tool")
        assert result["content"] == str(args_of["a"] + args_of["b"])
        screen = tmux.wait_for(lambda s: "Tool: add" in s and "allowed once" in s and "Result" in s
                               and "Ready" in s, 30, "the call block with its result")
        assert "broken" in screen and "exited" in screen  # the crashed server: one line

        use_tool(tmux, "add")
        ask(tmux, "Add again.")
        tmux.wait_for(lambda s: s.count("The model wants to run add") == 1, 60, "the dialog")
        tmux("send-keys", "-t", "e2e", "d")  # deny: the model is told, and answers
        chat = wait_saved(tmp_path, lambda c: sum(m["role"] == "tool" for m in c["messages"]) == 2
                          and c["messages"][-1]["role"] == "assistant"
                          and not c["messages"][-1]["interrupted"], 90, "the answer after deny")
        assert "did not allow" in [m for m in chat["messages"] if m["role"] == "tool"][-1]["content"]

        use_tool(tmux, "add")
        ask(tmux, "And once more.")
        tmux.wait_for(lambda s: "The model wants to run add" in s, 60, "the dialog")
        tmux("send-keys", "-t", "e2e", "Escape")  # stop: no further answer for this message
        tmux.wait_for(lambda s: "loop stopped" in s and "Ready" in s, 30, "the loop stopped")
        chat = saved(tmp_path)
        assert chat["messages"][-1]["role"] == "tool" and "did not allow" in chat["messages"][-1]["content"]
        tmux("send-keys", "-t", "e2e", "C-q")
        assert wait_file(exit_file, 30), tmux.screen()
    finally:
        tmux.kill()

    # --continue: the calls are shown, and the next message reads only what is new
    line, exit_file = command(tmp_path, f"--continue {args}", env)
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "120", "-y", "40", line)
        screen = tmux.wait_for(lambda s: ready(s) and "Restored the model" in s, 90,
                               "the chat reopened with its state")
        assert "Tool: add" in screen, screen
        before = saved(tmp_path)
        ask(tmux, "Thanks.")
        chat = wait_saved(tmp_path, lambda c: len(c["messages"]) > len(before["messages"]) + 1
                          and not c["messages"][-1]["interrupted"], 90, "the answer")
        stats = chat["messages"][-1]["stats"]
        # read: the stopped call's refusal (never read: the loop ended there) and "Thanks."
        assert stats["reused_tokens"] >= 0.95 * stats["prompt_length"], stats
        assert stats["prompt_tokens"] <= 200, stats
        tmux("send-keys", "-t", "e2e", "C-q")
        assert wait_file(exit_file, 30), tmux.screen()
    finally:
        tmux.kill()
