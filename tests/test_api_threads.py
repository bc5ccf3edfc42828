"""The Python API as an embedding program uses it, on the real starter model in its
worker process: two threads calling `session.chat` at once both get answers (the second waits
its turn); `timeout=` gives up with SessionBusy; a thread that starts a second answer while
its own first is unread is told at once (it would wait for itself). Ctrl-C (SIGINT) ends a
script that reads a stream within a second, and its worker with it, even while the worker is
in the middle of a long step (stood in for by stopping the worker: SIGSTOP)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
ASK = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def session():
    pytest.importorskip("llama_cpp")
    import pocketchat

    with pocketchat.load("starter", offline=True) as s:
        yield s


def test_two_threads_both_get_answers(session):
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            results[i] = session.chat(ASK, max_tokens=24, seed=i, thinking=False)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(results) == [0, 1]
    assert all(r.finish_reason in ("stop", "length") and r.text for r in results.values())


def test_a_caller_that_will_not_wait_gets_session_busy(session):
    from pocketchat.errors import SessionBusy

    stream = session.chat(ASK, max_tokens=64, stream=True, thinking=False)
    next(stream)  # this thread's answer holds the session now
    got: list[BaseException] = []

    def impatient() -> None:
        try:
            session.chat(ASK, max_tokens=4, thinking=False, timeout=0.2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            got.append(exc)

    t = threading.Thread(target=impatient)
    started = time.monotonic()
    t.start()
    t.join(30)
    assert isinstance(got[0], SessionBusy) and isinstance(got[0], TimeoutError), got
    assert "after 0.2 s" in got[0].message and time.monotonic() - started < 10
    with pytest.raises(SessionBusy, match="this thread's previous answer is still being read"):
        next(session.chat(ASK, max_tokens=4, stream=True, thinking=False))
    stream.close()
    assert session.chat(ASK, max_tokens=4, thinking=False).finish_reason in ("stop", "length")


SCRIPT = """
import pocketchat
s = pocketchat.load("starter", offline=True)
for chunk in s.chat([{"role": "user", "content": "Write a long story about a cat."}],
                    stream=True, max_tokens=2000, thinking=False):
    if chunk.text:
        print("T", end="", flush=True)
"""


def test_ctrl_c_ends_a_streaming_script_and_its_worker_within_a_second(tmp_path):
    pytest.importorskip("llama_cpp")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        seen = b""
        deadline = time.monotonic() + 120
        while b"TTT" not in seen and time.monotonic() < deadline:
            seen += os.read(proc.stdout.fileno(), 64)
        assert b"TTT" in seen, proc.stderr.read().decode()[-2000:]
        kids = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                               text=True).stdout.split()]
        assert kids, "the worker process was not found"
        for kid in kids:
            os.kill(kid, signal.SIGSTOP)  # a long step in flight: it cannot answer a cancel
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        took = time.monotonic() - started
        err = proc.stderr.read().decode()
        assert took < 1.0, (took, err[-2000:])
        assert "KeyboardInterrupt" in err
        deadline = time.monotonic() + 1.0
        while any(Path(f"/proc/{k}").exists() for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [k for k in kids if Path(f"/proc/{k}").exists()], "the worker outlived its script"
    finally:
        if proc.poll() is None:
            proc.kill()
