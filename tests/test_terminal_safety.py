"""In a real terminal (tmux): text from a saved chat or a paste never drives the terminal,
SIGTERM mid-answer saves and restores the terminal, a read-only conversation folder is reported."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from support import terminal
from support.terminal import Tmux
from support.uitools import blank_rows_under_the_text

from pocketchat.paths import settings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

REPO = Path(__file__).resolve().parents[1]
EVIL = "\x1b]0;HACKED-TITLE\x07\x1b[2J\x1b[H"


def _saved_chat(content: str, *, model: str = "") -> Path:
    folder = settings().conversations_dir
    folder.mkdir(parents=True, exist_ok=True)
    data = {"version": 1, "id": "20260101-000000-abcdef", "title": "evil" + EVIL, "created": 1.0,
            "updated": 2.0, "model": model, "system": None,
            "messages": [{"role": "user", "content": "hello there"},
                         {"role": "assistant", "content": content, "thinking": ""}]}
    path = folder / "20260101-000000-abcdef.json"
    path.write_text(json.dumps(data))
    return path


def test_continue_with_escapes_in_the_saved_chat_shows_them_harmlessly(tmp_path):
    pytest.importorskip("llama_cpp")
    _saved_chat(f"BEFORE-MARK {EVIL} AFTER-MARK")
    command, exit_file = terminal.command(tmp_path, "--model starter --continue --no-think")
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        screen = tmux.wait_for(terminal.ready, 90, "the starter model to load")
        time.sleep(0.5)
        screen = tmux.screen()
        title = tmux("display-message", "-p", "-t", "e2e", "#{pane_title}").strip()
        assert "HACKED" not in title
        assert "hello there" in screen and "BEFORE-MARK" in screen and "AFTER-MARK" in screen, screen
        assert "␛" in screen
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
    finally:
        tmux.kill()


def test_history_show_prints_escapes_visibly(tmp_path):
    import subprocess

    _saved_chat(f"answer {EVIL} end")
    done = subprocess.run([sys.executable, "-m", "pocketchat", "history", "--show", "20260101-000000-abcdef"],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "answer ␛]0;HACKED-TITLE␇␛[2J␛[H end" in done.stdout
    listing = subprocess.run([sys.executable, "-m", "pocketchat", "history"], capture_output=True, text=True,
                             timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "\x1b" not in listing.stdout and "evil␛]0;HACKED" in listing.stdout


def test_a_paste_with_control_characters_keeps_its_order_and_saves_no_raw_escape(tmp_path):
    with terminal.starter_chat(tmp_path) as (tmux, exit_file):
        tmux("set-buffer", "-b", "evil", "abc \x1b[2J def ghi")
        tmux("paste-buffer", "-p", "-b", "evil", "-t", "e2e")  # bracketed, as a terminal pastes
        screen = tmux.wait_for(lambda s: "ghi" in s, 10, "the paste")
        assert "abc ␛[2J def ghi" in screen, screen
        tmux("send-keys", "-t", "e2e", "Enter")
        time.sleep(1.0)
        tmux("send-keys", "-t", "e2e", "Escape")
        time.sleep(1.0)
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
        saved = list(settings().conversations_dir.glob("*.json"))
        assert len(saved) == 1
        chat = json.loads(saved[0].read_text())
        assert chat["messages"][0]["content"] == "abc ␛[2J def ghi"
        assert "\x1b" not in saved[0].read_text() and "\\u001b" not in saved[0].read_text()


def test_continue_without_model_reopens_the_model_the_chat_was_held_with(tmp_path):
    pytest.importorskip("llama_cpp")
    _saved_chat("An earlier answer.", model="SmolLM2-135M-Instruct (starter)")
    command, exit_file = terminal.command(tmp_path, "--continue --no-think", {"HF_HUB_OFFLINE": "0"})
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        screen = tmux.wait_for(lambda s: terminal.ready(s) or "instead?" in s, 90, "the model or a question")
        assert "instead?" not in screen and "SmolLM2-135M-Instruct (starter)" in screen, screen
        assert "An earlier answer." in screen
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
    finally:
        tmux.kill()


def _pid(tmp_path: Path) -> int:
    return int((tmp_path / "pid").read_text().strip())


def test_sigterm_mid_answer_saves_restores_the_terminal_and_exits(tmp_path):
    pytest.importorskip("llama_cpp")
    command, exit_file = terminal.command(tmp_path, "--model starter --no-think")
    stty = tmp_path / "stty.txt"
    command = command.replace("; sleep 60", f"; stty -a > {stty}; sleep 60")
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        tmux.wait_for(terminal.ready, 90, "the starter model to load")
        tmux("send-keys", "-t", "e2e", "-l", "Write a very long story about a dragon, in many paragraphs.")
        tmux("send-keys", "-t", "e2e", "Enter")
        tmux.wait_for(lambda s: "Answering" in s, 60, "the answer to stream")
        os.kill(_pid(tmp_path), signal.SIGTERM)
        assert terminal.wait_file(exit_file, 30), tmux.screen()
        assert exit_file.read_text().strip() == "143"
        screen = tmux.screen()
        assert "Terminated" not in screen and "Traceback" not in screen
        assert tmux("display-message", "-p", "-t", "e2e", "#{alternate_on}").strip() == "0"
        assert terminal.wait_file(stty, 10)
        modes = stty.read_text().split()
        assert "icanon" in modes and "echo" in modes  # the terminal is back in cooked mode
        saved = list(settings().conversations_dir.glob("*.json"))
        assert len(saved) == 1
        chat = json.loads(saved[0].read_text())
        answer = chat["messages"][-1]
        assert answer["role"] == "assistant" and answer["interrupted"] and answer["content"].strip()
    finally:
        tmux.kill()


def test_a_read_only_conversation_folder_is_reported_and_quitting_reminds(tmp_path):
    pytest.importorskip("llama_cpp")
    from support.readonly import read_only
    folder = settings().conversations_dir
    command, exit_file = terminal.command(tmp_path, "--model starter --no-think")
    command = command.replace("; sleep 60", "; sleep 60")
    tmux = Tmux()
    with read_only(folder):
        try:
            tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "40", command)
            tmux.wait_for(terminal.ready, 90, "the starter model to load")
            tmux("send-keys", "-t", "e2e", "-l", "Say hi.")
            tmux("send-keys", "-t", "e2e", "Enter")
            screen = tmux.wait_for(lambda s: "Could not save" in s, 90, "the save warning")
            flat = " ".join(screen.split())
            assert "cannot be written to" in flat and "Free some disk space" not in flat
            tmux.wait_for(lambda s: "Ready" in s or "Stopped" in s, 60, "the answer to end")
            tmux("send-keys", "-t", "e2e", "C-q")
            assert terminal.wait_file(exit_file, 30), tmux.screen()
            after = " ".join(tmux.screen().split())
            assert "note: this chat was not saved" in after and "cannot be written to" in after, after
        finally:
            tmux.kill()


def test_closing_the_terminal_mid_answer_ends_the_process_and_keeps_the_chat(tmp_path):
    """A closed terminal (SIGHUP, the tty gone) while an answer streams and a notice shows:
    the chat is saved and the process ends, never left behind spinning on a dead terminal."""
    pytest.importorskip("llama_cpp")
    import psutil

    command, _ = terminal.command(tmp_path, "--model starter --no-think")
    command = command.replace("; exec ", "; ")  # run by a shell, as a terminal's shell runs it
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "110", "-y", "34", command)
        tmux.wait_for(terminal.ready, 90, "the starter model to load")
        shell = psutil.Process(_pid(tmp_path))
        pid = next(p.pid for p in shell.children() if "pocketchat" in " ".join(p.cmdline()))
        tmux("send-keys", "-t", "e2e", "-l", "Write a very long story about a dragon, in many paragraphs.")
        tmux("send-keys", "-t", "e2e", "Enter")
        tmux.wait_for(lambda s: "Answering" in s, 60, "the answer to stream")
        tmux("send-keys", "-t", "e2e", "-l", "And another one.")
        tmux("send-keys", "-t", "e2e", "Enter")  # refused while the answer streams: a notice shows
        tmux.wait_for(lambda s: "still streaming" in s, 10, "the notice")
    finally:
        tmux.kill()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    else:
        cpu = psutil.Process(pid).cpu_percent(interval=1.0)
        os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"the chat process outlived its terminal by 30 s (using {cpu:.0f}% CPU)")
    chat = json.loads(next(settings().conversations_dir.glob("*.json")).read_text())
    answer = chat["messages"][-1]
    assert answer["role"] == "assistant" and answer["interrupted"] and answer["content"].strip()


def _wakeups(pid: int) -> int:
    """Times the process's threads went to sleep and were woken (voluntary context switches)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:  # a thread that just ended
            continue
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_idle_chat_sleeps_yet_a_lone_esc_and_ctrl_q_act_at_once(tmp_path):
    """Each wake-up takes a core from the model for a moment (and a laptop's battery): the
    terminal reader waits for input instead of looking ten times a second."""
    with terminal.starter_chat(tmp_path) as (tmux, exit_file):
        assert terminal.wait_file(tmp_path / "pid", 10)
        pid = int((tmp_path / "pid").read_text())
        time.sleep(1.0)
        before = _wakeups(pid)
        time.sleep(5.0)
        woke = _wakeups(pid) - before
        assert woke < 20, f"the idle chat woke {woke} times in 5 s"  # 50+ when polling at 10 Hz

        tmux("send-keys", "-t", "e2e", "C-p")
        tmux.wait_for(lambda s: "Search for commands" in s, 10, "the command palette")
        tmux("send-keys", "-t", "e2e", "Escape")  # a lone Esc: told from a key's sequence by time
        tmux.wait_for(lambda s: "Search for commands" not in s and terminal.ready(s), 3, "Esc to close it")
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 10), tmux.screen()
        assert exit_file.read_text().strip() == "0"


def _answered_tokens(screen: str) -> int:
    """The tokens the status bar says the answer in flight has (0 when none is in flight)."""
    status = next((line for line in screen.splitlines() if line.startswith(" Answering ")), "")
    match = re.search(r"(\d+) tokens", status)
    return int(match.group(1)) if match else 0


def test_the_line_being_written_sits_right_above_the_prompt_in_a_real_terminal(tmp_path):
    """Read mid-answer once the answer is longer than the view (the question scrolled out of
    it): the newest line is right above the prompt, no blank rows of the answer's room under it.
    A short pane, so that a loaded machine's few tokens a second fill it soon."""
    question = "Tell me about the sea and its storms."
    with terminal.starter_chat(tmp_path, "--bench-tokens 400", size=(70, 18)) as (tmux, exit_file):
        tmux("send-keys", "-t", "e2e", "-l", question)
        tmux("send-keys", "-t", "e2e", "Enter")
        tmux.wait_for(lambda s: _answered_tokens(s) > 0, 120, "the answer to start")
        samples: list[tuple[int, str]] = []
        deadline = time.monotonic() + 400
        while len(samples) < 8 and time.monotonic() < deadline:
            screen = tmux.screen()  # each capture is a process taking CPU: a few a second
            if not _answered_tokens(screen):
                break  # the answer ended
            if "the sea and its" not in screen:  # the answer is longer than the view
                samples.append((blank_rows_under_the_text(screen), screen))
            time.sleep(0.5)
        assert len(samples) >= 3, f"{len(samples)} readings mid-answer:\n{tmux.screen()}"
        worst = max(samples, key=lambda sample: sample[0])
        assert worst[0] == 0, f"{[n for n, _ in samples]} blank rows; the worst screen:\n{worst[1]}"
        tmux("send-keys", "-t", "e2e", "Escape")
        tmux.wait_for(lambda s: "Stopped" in s or "Ready" in s, 60, "the answer to stop")
        tmux("send-keys", "-t", "e2e", "C-q")
        assert terminal.wait_file(exit_file, 30), tmux.screen()
