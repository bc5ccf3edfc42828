"""The worker's OS process: its launch as a fresh interpreter, the thread that reads its pipe,
and its reaping (the engine over it is `worker.WorkerEngine`).

Launch (`launch`): the child is a fresh interpreter (`sys.executable -c BOOT`, see
`WorkerProcess`) that imports `pocketchat.engines.worker.child` and nothing of the caller: unlike
multiprocessing's spawn it never re-runs the caller's `__main__`, so an app that calls
`pocketchat.load()` at the top of a script, in a notebook or in the REPL works as written.
It inherits one end of a socket pair (a `multiprocessing.connection.Connection` on both
sides) and the write end of a pipe it never closes (the parent's read end is the sentinel:
readable once the child is gone), and gets the caller's `sys.path` (what spawn passed too) and
then its arguments over the connection. Its stdout and stderr are the worker's log from its
first byte (the interpreter's own errors included), so nothing it prints reaches the terminal
or the chat, whatever `sys.stderr` is in the parent.

Reading (`Reader`): a thread takes every message from the pipe as it comes: beats and the
process's state feed the liveness rule (`liveness.Watch`), each request's replies go to its
own queue (`routes`, registered by `Reader.expect`), the rest (loading) to the inbox. While no
request is outstanding (none routed, the model loaded) the thread sleeps until a message or
the child's end, and the process is sampled only when `verdict()` is asked. Reaping (`reap`):
asked to close, killed when it does not, waited for: no zombie is left.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pocketchat.errors import EngineError
from pocketchat.engines.types import Liveness
from pocketchat.engines.worker.liveness import BEAT_SECONDS, ProcessProbe, Watch

GONE = object()  # in a queue: the pipe closed (the child ended, or the engine was closed)


def log_tail(log_path: str | None, lines: int = 3) -> str:
    """The last non-empty lines the child wrote, for a crash message."""
    if not log_path:
        return ""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - 8192, 0))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:])


class Reader:
    """Every message from the child, taken from the pipe as it comes (a thread of its own, so
    beats never pile up): beats and samples of the process feed `watch` (periodic while a
    request is outstanding, else on demand: `verdict`); chunks and results go to their
    request's queue in `routes` (none: dropped), the rest (loading) to `inbox`; `GONE` goes
    to every queue when the pipe closes. It holds no reference to the engine (the engine's
    finalizer must still run when it is dropped)."""

    def __init__(self, conn: Any, proc: Any) -> None:
        self.conn, self.sentinel = conn, proc.sentinel
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.routes: dict[int, queue.SimpleQueue] = {}
        self.loading = True  # until "ready" or "load_error" is delivered
        self.watch = Watch(time.monotonic())
        self.probe = ProcessProbe(proc.pid)
        self.gone = threading.Event()
        self._sampled = 0.0
        self._sample_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True, name="pocketchat-reader")
        self.thread.start()

    def expecting(self) -> bool:
        """Whether a request is outstanding (the model's load included): only then does the
        child beat, and only then does its silence count."""
        return self.loading or bool(self.routes)

    def expect(self, req: int, inbox: queue.SimpleQueue) -> None:
        """Route request `req`'s replies to `inbox`; the first after none were outstanding
        gives the child SILENCE seconds from now to be heard (its beat resumes with it)."""
        if not self.expecting():
            self.watch.expect(time.monotonic())
        self.routes[req] = inbox

    def verdict(self) -> Liveness:
        """The liveness verdict, sampled now when the last sample is older than BEAT_SECONDS
        (idle, the thread does not sample by itself)."""
        now = time.monotonic()
        if now - self._sampled >= BEAT_SECONDS and not self.gone.is_set():
            self._sample(now)
        return self.watch.verdict

    def _sample(self, now: float) -> None:
        with self._sample_lock:
            self._sampled = now
            stopped, cpu = self.probe()
            self.watch.judge(now, stopped=stopped, cpu_seconds=cpu, expecting=self.expecting())

    def _run(self) -> None:
        try:
            while True:
                timeout = BEAT_SECONDS if self.expecting() else None  # idle: no wakeups
                ready = multiprocessing.connection.wait([self.conn, self.sentinel], timeout)
                if self.conn in ready or (ready and self.conn.poll()):
                    msg = self.conn.recv()
                    self.watch.heard(time.monotonic())
                    if msg[0] in ("ready", "load_error"):
                        self.loading = False
                    if msg[0] != "beat":
                        self._deliver(msg)
                elif ready:  # the child ended and nothing is left to read
                    return
                now = time.monotonic()
                if now - self._sampled >= BEAT_SECONDS:
                    self._sample(now)
        except (EOFError, OSError, ValueError, TypeError):  # closed, by the child or the engine
            return
        finally:
            self.gone.set()
            self.inbox.put(GONE)
            for inbox in list(self.routes.values()):
                inbox.put(GONE)

    def _deliver(self, msg: tuple) -> None:
        if msg[0] in ("chunk", "result"):  # a request no queue waits for any more: dropped
            inbox = self.routes.get(msg[1])
            if inbox is not None:
                inbox.put(msg)
            return
        self.inbox.put(msg)


def describe_exit(exitcode: int | None, stuck: bool = False) -> str:
    """How the worker ended, for a message; `stuck`: it was not responding before it ended
    (then a kill is not guessed to be the out-of-memory killer's)."""
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        why = {"SIGKILL": " (killed; often the out-of-memory killer)", "SIGSEGV": " (a crash in the backend)",
               "SIGABRT": " (the backend aborted)"}.get(sig, "")
        if stuck:
            why = " after it had stopped responding"
        return f"was ended by {sig}{why}"
    return f"exited with code {exitcode}"


# The child's first lines: Ctrl-C belongs to the parent (the terminal sends it to the whole
# process group); no module is taken from the working directory ('' that -c puts first: a
# stray multiprocessing.py there would shadow the stdlib's); the caller's sys.path, then
# pocketchat's entry. Nothing of the caller's __main__ is imported. "pocketchat-engine"
# names the process in `ps`.
BOOT = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN)  # pocketchat-engine\n"
        "sys.path[:1] = [] if sys.path[:1] == [''] else sys.path[:1]\n"
        "from multiprocessing.connection import Connection\n"
        "conn = Connection(int(sys.argv[1]))\n"
        "sys.path[:] = conn.recv()\n"
        "from pocketchat.engines.worker.child import run\n"
        "run(conn)\n")


class WorkerProcess:
    """The worker's OS process, as `multiprocessing.Process` shows one: `pid`, `sentinel`
    (a descriptor readable once it is gone), `is_alive()`, `join(timeout)`, `kill()`, and
    `exitcode` (None while it runs; minus the signal number when a signal stopped it)."""

    def __init__(self, popen: subprocess.Popen, sentinel: int) -> None:
        self._popen = popen
        self.sentinel = sentinel
        self.pid = popen.pid

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        if self._popen.poll() is None:
            try:
                self._popen.kill()
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Let go of the sentinel (once the process is reaped)."""
        if self.sentinel >= 0:
            try:
                os.close(self.sentinel)
            except OSError:
                pass
            self.sentinel = -1


def _interpreter() -> str:
    """The Python that runs the worker: the one running this (multiprocessing's choice, so
    `multiprocessing.set_executable`, where an embedding app sets it, is honoured)."""
    from multiprocessing import spawn

    exe = spawn.get_executable() or sys.executable
    if not exe:
        raise EngineError("cannot start the model worker: this Python does not know its own "
                          "interpreter (sys.executable is empty)",
                          hint="Set it with multiprocessing.set_executable(path), or load with "
                               "in_process=True.")
    return os.fsdecode(exe)


def _open_log(log_path: str) -> int:
    """The worker's stdout/stderr: its log (emptied, appended to), or /dev/null."""
    try:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        return os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


def launch(args: tuple, log_path: str
           ) -> tuple[multiprocessing.connection.Connection, WorkerProcess]:
    """Start the worker as its own interpreter (see the module docstring) and hand it
    `args` (`child.main`'s after the connection); the parent's end and the process."""
    ours, theirs = multiprocessing.connection.Pipe(duplex=True)
    alive_r, alive_w = os.pipe()
    out = _open_log(log_path)
    try:
        popen = subprocess.Popen(
            [_interpreter(), "-c", BOOT, str(theirs.fileno())],
            pass_fds=(theirs.fileno(), alive_w), stdin=subprocess.DEVNULL, stdout=out,
            stderr=out, close_fds=True)
    except BaseException as exc:
        ours.close()
        os.close(alive_r)
        if isinstance(exc, OSError):
            raise EngineError(f"cannot start the model worker: {exc}",
                              hint="Load with in_process=True to run the model in this "
                                   "process.") from exc
        raise
    finally:
        theirs.close()
        os.close(alive_w)
        os.close(out)
    try:  # a child that died at once is reported by the first read (EngineCrashed)
        ours.send([p for p in sys.path if isinstance(p, str)])
        ours.send(args)
    except OSError:
        pass
    return ours, WorkerProcess(popen, alive_r)


def reap(proc: "WorkerProcess", conn: Any, grace: list[float] | None = None) -> None:
    """Ask the worker to close, kill it when it has not within `grace[0]` seconds (2 s; 0
    after Ctrl-C stopped one of its answers: the program ends now, and the worker with it),
    and wait for it (no zombie is left); then let go of the connection and the sentinel."""
    try:
        if proc.is_alive():
            try:
                conn.send(("close",))
            except (OSError, ValueError):
                pass
            proc.join(2 if grace is None else grace[0])
        if proc.is_alive():
            proc.kill()
            proc.join(2)
    finally:
        conn.close()
        if not proc.is_alive():
            proc.close()
