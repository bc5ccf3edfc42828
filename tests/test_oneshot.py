"""One-shot mode: `echo QUESTION | pocketchat` and `pocketchat -p QUESTION` answer on stdout and exit;
with no terminal and no prompt, one clear message (the full-screen chat never writes into a file)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "pocketchat", *args], input=stdin, capture_output=True,
                          text=True, timeout=240, cwd=REPO, env=env,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def test_a_piped_question_is_answered_on_stdout():
    pytest.importorskip("llama_cpp")
    done = _run(["--model", "starter", "--no-think"], stdin="What is the capital of France? One sentence.\n")
    assert done.returncode == 0, done.stderr
    assert "Paris" in done.stdout or len(done.stdout.split()) >= 3, done.stdout
    assert "\x1b" not in done.stdout and done.stdout.endswith("\n")
    assert "Ask anything" not in done.stdout  # no chat screen


def test_dash_p_answers_and_nothing_is_saved():
    pytest.importorskip("llama_cpp")
    from pocketchat.paths import settings

    done = _run(["--model", "starter", "-p", "Say hello in three words."])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "\x1b" not in done.stdout
    assert not list(settings().conversations_dir.glob("*.json"))


def test_an_empty_pipe_is_a_clear_message():
    done = _run(["--model", "starter"], stdin="")
    assert done.returncode == 1
    assert done.stderr.startswith("error: no question: the prompt is empty")
    assert '-p "QUESTION"' in done.stderr and done.stdout == ""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_output_to_a_file_from_a_terminal_without_a_prompt_says_what_to_do(tmp_path):
    from support.terminal import Tmux

    out, exit_file = tmp_path / "out.txt", tmp_path / "rc"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in os.environ.items()
                   if k.startswith(("POCKETCHAT_", "HF_")) or k in ("PATH", "HOME"))
    command = (f"cd {shlex.quote(str(REPO))} && env {env} PYTHONPATH={shlex.quote(str(REPO))} TERM=xterm-256color "
               f"{shlex.quote(sys.executable)} -m pocketchat --model starter > {out}; echo $? > {exit_file}; sleep 30")
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "e2e", "-x", "100", "-y", "20", command)
        deadline = time.monotonic() + 60
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        screen = tmux.screen()
        assert exit_file.exists(), screen
        assert exit_file.read_text().strip() == "1"
        assert "the chat needs a terminal" in screen and '-p "QUESTION"' in screen
        assert out.read_text() == ""  # no screen codes written into the file
    finally:
        tmux.kill()
