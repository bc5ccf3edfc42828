"""The worker is launched as its own interpreter (`process.launch`), never through
multiprocessing's spawn: a script that calls `pocketchat.load()` at its top level (no
`if __name__ == "__main__":` guard) runs once and answers, so does code typed into the REPL;
a worker that cannot start is reported with its own output; Ctrl-C belongs to the parent;
nothing is left behind after close."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from support.engine_makers import llama_plan
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.engines.worker.parent import WorkerEngine
from pocketchat.errors import EngineCrashed

pytestmark = pytest.mark.slow  # real processes and the starter model
REPO = Path(__file__).resolve().parents[1]
SHORT = ChatOptions(max_tokens=4, ignore_eos=True)

SCRIPT = """\
import pathlib
import pocketchat

runs = pathlib.Path("runs.txt")
runs.write_text(runs.read_text() + "ran\\n" if runs.exists() else "ran\\n")
with pocketchat.load("starter", ctx=512) as session:
    reply = session.chat([{"role": "user", "content": "Say hi."}], max_tokens=4)
    print("ANSWER", reply.finish_reason, reply.stats.generated_tokens)
"""


def run_python(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_a_script_without_a_main_guard_runs_once_and_answers(tmp_path):
    (tmp_path / "app.py").write_text(SCRIPT)
    done = run_python(["app.py"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ANSWER length 4" in done.stdout
    assert (tmp_path / "runs.txt").read_text() == "ran\n"  # the worker never re-ran the script
    assert "Traceback" not in done.stderr


def test_code_typed_into_the_repl_answers(tmp_path):
    done = run_python(["-i", "-q"], tmp_path, stdin=SCRIPT + "\nprint('END')\n")
    assert "ANSWER length 4" in done.stdout and "END" in done.stdout, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_a_worker_whose_interpreter_cannot_start_is_reported_with_its_output(
        tmp_path, starter_gguf, monkeypatch):
    from multiprocessing import spawn

    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ImportError: no module named pocketchat' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setattr(spawn, "_python_exe", str(broken))  # multiprocessing.set_executable's
    with pytest.raises(EngineCrashed) as info:
        WorkerEngine(llama_plan(512), starter_gguf)
    assert "exited with code 3 while loading the model" in info.value.message
    assert "ImportError: no module named pocketchat" in info.value.message


def test_the_worker_is_its_own_process_ignores_ctrl_c_and_is_reaped(starter_gguf):
    eng = WorkerEngine(llama_plan(512), starter_gguf)
    proc = psutil.Process(eng.pid)
    cmd = " ".join(proc.cmdline())
    assert "pocketchat-engine" in cmd and "spawn_main" not in cmd
    assert proc.ppid() == os.getpid()
    os.kill(eng.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
    final = list(eng.chat([Message("user", "Hi")], SHORT))[-1]
    assert final.finish_reason == "length" and final.stats.generated_tokens == 4
    sentinel = eng._proc.sentinel
    eng.close()
    assert not psutil.pid_exists(eng.pid) or proc.status() != psutil.STATUS_ZOMBIE
    with pytest.raises(psutil.NoSuchProcess):
        proc.status()  # reaped: no zombie left
    with pytest.raises(OSError):
        os.fstat(sentinel)  # and its sentinel descriptor is closed


def test_a_dropped_engine_is_reaped_when_the_interpreter_exits(tmp_path):
    code = textwrap.dedent("""\
        import pocketchat
        s = pocketchat.load("starter", ctx=512)  # never closed
        print("PID", s.engine.pid, flush=True)
    """)
    done = run_python(["-c", code], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    pid = int(done.stdout.split("PID")[1].split()[0])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
