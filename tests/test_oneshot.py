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


def test_threads_beyond_the_cores_are_said_in_one_line_and_kept_within_reach():
    """`-p --threads 999` on this machine: one note with the machine's count, a count the
    cores can run (999 threads took 48-82 s for a one-line answer here, 16 took 4.7 s), and
    the answer. --threads 3 is run as asked, with the same note."""
    pytest.importorskip("llama_cpp")
    cpus = os.cpu_count() or 1
    done = _run(["--model", "starter", "--no-think", "--threads", "999", "-p", "Say hi."])
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: --threads 999")]
    assert len(notes) == 1, done.stderr
    assert f"this machine has {cpus} CPU threads" in notes[0]
    assert "more threads than cores slow every step" in notes[0]
    assert f"running {8 * cpus}" in notes[0] and done.stdout.strip()
    asked = cpus + 1
    done = _run(["--model", "starter", "--no-think", "--threads", str(asked), "-p", "Say hi."])
    assert done.returncode == 0, done.stderr
    assert f"note: --threads {asked}: this machine has {cpus} CPU threads" in done.stderr
    assert "running" not in done.stderr
