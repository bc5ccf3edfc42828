"""The engine in a child process: `WorkerEngine` implements `Engine` over a pipe.

Why: a busy Python thread in the same process (the Textual UI) starves the generation loop
of the GIL (75 -> 17 tok/s measured here), and a native crash in llama.cpp would take the chat
with it. So the backend runs in a child process; the parent only reads chunks.

Launch (`launch`): the child is a fresh interpreter (`sys.executable -c BOOT`, see
`WorkerProcess`) that imports `pocketchat.engines.child` and nothing of the caller: unlike
multiprocessing's spawn it never re-runs the caller's `__main__`, so an app that calls
`pocketchat.load()` at the top of a script, in a notebook or in the REPL works as written.
It inherits one end of a socket pair (a `multiprocessing.connection.Connection` on both
sides) and the write end of a pipe it never closes (the parent's read end is the sentinel:
readable once the child is gone), and gets the caller's `sys.path` (what spawn passed too) and
then its arguments over the connection. Its stdout and stderr are the worker's log from its
first byte (the interpreter's own errors included), so nothing it prints reaches the terminal
or the chat, whatever `sys.stderr` is in the parent.

Protocol (pickled tuples over one duplex connection):
  parent -> child   ("chat", req, messages, options) | ("complete", req, prompt, options)
                    | ("cancel", req) | ("close",)
                    | ("save_state" | "load_state", req, path) | ("status", req)
  child -> parent   ("progress", stage, fraction) | ("ready", EngineInfo)
                    | ("load_error", PocketchatError) | ("chunk", req, Chunk)
                    | ("result", req, value or PocketchatError)  (status: a dict)
                    | ("beat",)  (every liveness.BEAT_SECONDS, from a thread of its own)
A reader thread (`_Reader`) takes every message from the pipe as it comes: beats and the
process's state feed the liveness rule (`liveness.Watch`: `liveness()`), answers go to their
request's queue, the rest to the inbox the callers read. With a plan's `parallel` N > 1 (and an
engine that decodes N together: `info.sequences`), up to N answers are in flight at once, each
with its own queue, and each answer (`WorkerAnswer`) can be cancelled alone.
The child (`child.main`) coalesces deltas: it sends the first chunk of an answer at once (time
to first token) and then at most one chunk every `chunk_interval` seconds (FLUSH_SECONDS, 30 ms,
unless the owner asks for another), so the pipe costs the generation loop one small send per
interval, not one per token. A child thread listens for cancel, so cancel reaches llama.cpp
(its abort callback included) inside a decode.

Loading: the constructor blocks until the model is loaded (default), or returns at once with
`wait=False`; then call `wait_ready(timeout)` (it reports `on_progress(stage, fraction)`),
read `progress`, and use the engine once it returns True. Load errors are re-raised in the
parent as the same pocketchat error, fields and hint included (errors pickle whole). If the child dies
(abort, segfault, kill -9, out of memory, an interpreter that could not start), the caller gets
`EngineCrashed` with the exit code or signal name and the log's last lines; the messages passed
to `chat()` are never modified, and a new engine can be opened at once.

A worker that stops answering (SIGSTOP, stuck, a swap storm) is known within 2 s
(`liveness()`): an answer in flight waits for it (it may resume), `cancel()` ends that answer at
once (finish_reason 'cancelled'; the worker drops it if it resumes), new requests raise
`EngineNotResponding`, and `kill()` ends the process without waiting for it.
"""

from __future__ import annotations

import itertools
import multiprocessing.connection
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pocketchat.errors import EngineCrashed, EngineError, EngineNotResponding
from pocketchat.engines.child import FLUSH_SECONDS
from pocketchat.engines.liveness import BEAT_SECONDS, ProcessProbe, Watch
from pocketchat.engines.types import ChatOptions, Chunk, EngineInfo, Liveness, Message, Stats
from pocketchat.types import LoadPlan

_WORKER_IDS = itertools.count(1)
_GONE = object()  # in a queue: the pipe closed (the child ended, or the engine was closed)
_WAKE = object()  # in a queue: a cancel: the waiting caller looks again at once


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


# -- the parent -----------------------------------------------------------------------------


class _Reader:
    """Every message from the child, taken from the pipe as it comes (a thread of its own, so
    beats never pile up): beats and periodic samples of the process feed `watch`; chunks and
    results of a request with a queue in `routes` go there, the rest to `inbox`; `_GONE` goes
    to every queue when the pipe closes. It holds no reference to the engine (the engine's
    finalizer must still run when it is dropped)."""

    def __init__(self, conn: Any, proc: Any) -> None:
        self.conn, self.sentinel = conn, proc.sentinel
        self.inbox: queue.Queue = queue.Queue()
        self.routes: dict[int, queue.Queue] = {}
        self.watch = Watch(time.monotonic())
        self.probe = ProcessProbe(proc.pid)
        self.gone = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="pocketchat-reader")
        self.thread.start()

    def _run(self) -> None:
        sampled = 0.0
        try:
            while True:
                ready = multiprocessing.connection.wait([self.conn, self.sentinel], BEAT_SECONDS)
                if self.conn in ready or (ready and self.conn.poll()):
                    msg = self.conn.recv()
                    self.watch.heard(time.monotonic())
                    if msg[0] != "beat":
                        self._deliver(msg)
                elif ready:  # the child ended and nothing is left to read
                    return
                now = time.monotonic()
                if now - sampled >= BEAT_SECONDS:
                    sampled = now
                    stopped, cpu = self.probe()
                    self.watch.judge(now, stopped=stopped, cpu_seconds=cpu)
        except (EOFError, OSError, ValueError, TypeError):  # closed, by the child or the engine
            return
        finally:
            self.gone.set()
            self.inbox.put(_GONE)
            for inbox in list(self.routes.values()):
                inbox.put(_GONE)

    def _deliver(self, msg: tuple) -> None:
        if msg[0] in ("chunk", "result"):
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
        "from pocketchat.engines.child import run\n"
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


def _reap(proc: Any, conn: Any) -> None:
    """Ask the worker to close, kill it when it has not within 2 s, and wait for it (no
    zombie is left); then let go of the connection and the sentinel."""
    try:
        if proc.is_alive():
            try:
                conn.send(("close",))
            except (OSError, ValueError):
                pass
            proc.join(2)
        if proc.is_alive():
            proc.kill()
            proc.join(2)
    finally:
        conn.close()
        close = getattr(proc, "close", None)
        if close is not None and not proc.is_alive():
            close()


class WorkerEngine:
    """An `Engine` whose backend runs in a child process (see the module docstring)."""

    def __init__(self, plan: LoadPlan, path: Path, *, name: str | None = None, wait: bool = True,
                 timeout: float | None = None,
                 on_progress: Callable[[str, float], None] | None = None,
                 chunk_interval: float = FLUSH_SECONDS) -> None:
        path = Path(path)
        from pocketchat.paths import settings

        # One log per worker: a restarted engine never truncates or deletes a crashed one's.
        self.log_path = str(settings().cache_dir / f"worker-{os.getpid()}-{next(_WORKER_IDS)}.log")
        self._conn, self._proc = launch((plan, str(path), name, chunk_interval), self.log_path)
        self.plan = plan
        self.info = EngineInfo(backend=plan.backend, model=name or path.stem,
                               placement=plan.describe(), n_ctx=plan.n_ctx, path=str(path))
        self.progress: tuple[str, float] = ("starting", 0.0)
        self.ready = False
        self._on_progress = on_progress
        self._crash: EngineCrashed | None = None
        self._closed = False
        self._send_lock = threading.Lock()
        self._chat_lock = threading.Lock()
        self._req = 0
        self._current = 0
        self.parallel = plan.parallel  # what the loaded engine decodes together: set when ready
        self._stopping: set[int] = set()  # requests asked to stop (cancel)
        self._killed = ""  # why this engine ended its worker itself ("": it did not)
        self._reader = _Reader(self._conn, self._proc)
        self._inbox, self._routes = self._reader.inbox, self._reader.routes
        self._finalizer = weakref.finalize(self, _reap, self._proc, self._conn)
        if wait and not self.wait_ready(timeout):
            self.close()
            raise EngineError(f"the model did not load within {timeout:g} s")

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    # -- plumbing ---------------------------------------------------------------------------

    def _send(self, msg: tuple) -> None:
        with self._send_lock:
            try:
                self._conn.send(msg)
            except (OSError, ValueError) as exc:
                raise self._crashed("while sending a request") from exc

    def _crashed(self, when: str) -> EngineCrashed:
        if self._crash is None:
            self._proc.join(5)
            code = self._proc.exitcode
            ended = self._killed or ("the engine was closed" if self._closed else "")
            if ended:  # this process ended it: never blamed on memory or a crash
                message = f"the model worker was shut down {when} ({ended})"
            else:
                stuck = not self._reader.watch.verdict.responding
                message = f"the model worker {describe_exit(code, stuck)} {when}"
            tail = log_tail(self.log_path)
            if tail:
                message += f"; its last output: {tail} (full log: {self.log_path})"
            self._crash = EngineCrashed(message, exitcode=code)
        return self._crash

    def _recv(self, timeout: float | None = None, when: str = "") -> tuple | None:
        """The next message of the inbox, None on timeout (or a cancel's wake-up: look again);
        EngineCrashed when the child is gone."""
        if self._crash is not None:
            raise self._crash
        try:
            msg = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if msg is _GONE:
            self._inbox.put(_GONE)  # every later reader sees it too
            raise self._crashed(when)
        return msg if isinstance(msg, tuple) else None

    # -- liveness ---------------------------------------------------------------------------

    def liveness(self) -> Liveness:
        """Whether the worker answers (see `liveness`): sampled a few times a second."""
        if self._crash is not None or self._closed or self._reader.gone.is_set():
            return Liveness()  # ended: the crash or the close says so, not this
        return self._reader.watch.verdict

    def _not_responding(self) -> EngineNotResponding:
        return EngineNotResponding(self.liveness().message or "the model process is not responding")

    def _refuse_if_stuck(self) -> None:
        if not self.liveness().responding:
            raise self._not_responding()

    def _let_go(self, req: int) -> bool:
        """The caller asked this answer to stop and the worker does not respond: end it here."""
        return req in self._stopping and not self.liveness().responding

    def kill(self) -> None:
        """End the worker process at once (SIGKILL: a stopped or stuck one cannot be asked to
        stop) and close the engine; an answer still waiting ends with `EngineCrashed` saying so."""
        if self._closed:
            return
        stuck = not self.liveness().responding
        self._killed = "it was not responding" if stuck else "it was ended on request"
        self._crash = EngineCrashed(f"the model worker was shut down: {self._killed}",
                                    exitcode=-signal.SIGKILL)
        try:
            self._proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
        self.close()

    # -- loading ----------------------------------------------------------------------------

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the model is loaded (True) or `timeout` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0:
                return False
            msg = self._recv(left, "while loading the model")
            if msg is None:
                continue  # the deadline is checked above
            if msg[0] == "progress":
                self.progress = (msg[1], msg[2])
                if self._on_progress:
                    self._on_progress(msg[1], msg[2])
            elif msg[0] == "ready":
                self.info, self.ready, self.progress = msg[1], True, ("ready", 1.0)
                self.parallel = max(1, int(getattr(self.info, "sequences", 1)))
            elif msg[0] == "load_error":
                self._proc.join(5)
                self._closed = True
                self._finalizer()
                raise msg[1]
        return True

    # -- Engine -----------------------------------------------------------------------------

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None
             ) -> Iterator[Chunk]:
        snapshot = tuple(m if isinstance(m, Message) else Message(m.role, m.content)
                         for m in messages)  # frozen: the caller cannot change them later
        return self._chat(snapshot, options or ChatOptions())

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> Iterator[Chunk]:
        """The backend's raw continuation of `prompt` (see `base.EngineBase.complete`)."""
        sent = prompt if isinstance(prompt, str) else tuple(int(t) for t in prompt)
        return self._chat(sent, options or ChatOptions(), kind="complete")

    def _chat(self, messages: tuple[Message, ...] | str | tuple[int, ...], options: ChatOptions,
              kind: str = "chat") -> Iterator[Chunk]:
        if self.parallel > 1 and not self._closed and not self.ready:
            self.wait_ready()  # how many it answers at once is known once it is loaded
        if self.parallel > 1:
            return self._chat_shared(messages, options, kind)
        return self._chat_one(messages, options, kind)

    def _chat_one(self, messages: tuple[Message, ...] | str | tuple[int, ...],
                  options: ChatOptions, kind: str) -> Iterator[Chunk]:
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self.ready:
            self.wait_ready()
        self._refuse_if_stuck()
        if not self._chat_lock.acquire(blocking=False):
            raise EngineError("the engine is already answering; cancel that answer first")
        held, finished, req = True, False, 0
        try:
            self._req += 1
            req = self._current = self._req
            self._send((kind, req, messages, options))
            stats = Stats()
            while True:
                msg = self._recv(BEAT_SECONDS, "while answering")
                if msg is None:
                    if self._let_go(req):
                        finished = True
                        yield _let_go_chunk(stats)
                        return
                    continue
                if msg[0] == "chunk" and msg[1] == req:
                    chunk: Chunk = msg[2]
                    stats = chunk.stats
                    if chunk.finish_reason is not None:
                        # The answer is over: the engine is free before the caller sees its
                        # end, whatever the caller does with this iterator after.
                        finished = True
                        self._current, held = 0, False
                        self._chat_lock.release()
                        yield chunk
                        return
                    yield chunk
        finally:
            self._stopping.discard(req)
            if held:
                self._current = 0
                try:
                    if not finished and req and self._crash is None:
                        self._abandon(req)
                finally:
                    self._chat_lock.release()

    # -- several answers at once (parallel > 1) ---------------------------------------------

    def _chat_shared(self, messages: tuple[Message, ...] | str | tuple[int, ...],
                     options: ChatOptions, kind: str) -> "WorkerAnswer":
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self.ready:
            self.wait_ready()
        self._refuse_if_stuck()
        with self._send_lock:
            self._req += 1
            req = self._req
        return WorkerAnswer(self, req, self._answer_shared(req, messages, options, kind))

    def _take(self, inbox: queue.Queue, when: str) -> tuple | None:
        """The next message of a request's queue, None after BEAT_SECONDS or a wake-up."""
        try:
            msg = inbox.get(timeout=BEAT_SECONDS)
        except queue.Empty:  # a queue made after the reader ended gets no _GONE of its own
            msg = _GONE if self._reader.gone.is_set() else None
        if msg is _GONE:
            inbox.put(_GONE)
            raise self._crashed(when)
        return msg if isinstance(msg, tuple) else None

    def _answer_shared(self, req: int, messages: tuple[Message, ...] | str | tuple[int, ...],
                       options: ChatOptions, kind: str) -> Iterator[Chunk]:
        """One answer's chunks from its queue; its route lives exactly while it runs (an
        answer dropped unstarted leaves nothing behind)."""
        finished = False
        inbox: queue.Queue = queue.Queue()
        with self._send_lock:
            self._routes[req] = inbox
        try:
            if self._crash is not None:
                raise self._crash
            self._send((kind, req, messages, options))
            stats = Stats()
            while True:
                msg = self._take(inbox, "while answering")
                if msg is None:
                    if self._let_go(req):
                        finished = True
                        yield _let_go_chunk(stats)
                        return
                    continue
                chunk: Chunk = msg[2]
                stats = chunk.stats
                finished = chunk.finish_reason is not None
                yield chunk
                if finished:
                    return
        finally:
            self._stopping.discard(req)
            if not finished and self._crash is None and not self._closed:
                self._stop_shared(req, inbox)
            self._routes.pop(req, None)

    def _stop_shared(self, req: int, inbox: queue.Queue) -> None:
        """The caller stopped reading: cancel, and wait until the child ended that answer
        (its sequence is free then)."""
        try:
            self._send(("cancel", req))
        except EngineCrashed:
            return
        deadline = time.monotonic() + 10
        while deadline - time.monotonic() > 0 and self.liveness().responding:
            try:  # a worker that does not respond drops the answer if it resumes
                msg = self._take(inbox, "while answering")
            except EngineCrashed:
                return
            if msg is not None and msg[0] == "chunk" and msg[2].finish_reason:
                return

    def save_state(self, path: Path) -> int:
        """The backend's `save_state` in the worker (see `base.EngineBase.save_state`)."""
        return self._call("save_state", Path(path))

    def load_state(self, path: Path) -> str | None:
        """The backend's `load_state` in the worker (see `base.EngineBase.load_state`)."""
        return self._call("load_state", Path(path))

    def status(self) -> dict:
        """The backend's live figures (`base.EngineBase.status`), asked between answers."""
        return self._call("status")

    def _call(self, name: str, *args: Any) -> Any:
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self.ready:
            self.wait_ready()
        self._refuse_if_stuck()
        if self.parallel > 1:
            with self._send_lock:
                self._req += 1
                req = self._req
                self._routes[req] = inbox = queue.Queue()
            try:
                self._send((name, req, *args))
                while (msg := self._take(inbox, f"during {name}")) is None:
                    self._refuse_if_stuck()  # its late result is dropped (no queue for it)
                if isinstance(msg[2], BaseException):
                    raise msg[2]
                return msg[2]
            finally:
                self._routes.pop(req, None)
        if not self._chat_lock.acquire(blocking=False):
            raise EngineError("the engine is answering; save or load its state after the answer")
        try:
            self._req += 1
            req = self._req
            self._send((name, req, *args))
            while True:
                msg = self._recv(BEAT_SECONDS, f"during {name}")
                if msg is None:
                    self._refuse_if_stuck()  # its late result is skipped (another request's)
                elif msg[0] == "result" and msg[1] == req:
                    if isinstance(msg[2], BaseException):
                        raise msg[2]
                    return msg[2]
        finally:
            self._chat_lock.release()

    def _abandon(self, req: int) -> None:
        """The caller stopped reading: cancel and drain the answer so the pipe stays in step."""
        try:
            self._send(("cancel", req))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if not self.liveness().responding:
                    return  # it drops the answer if it resumes; each answer reads its own chunks
                msg = self._recv(min(BEAT_SECONDS, max(0.0, deadline - time.monotonic())))
                if msg is not None and msg[0] == "chunk" and msg[1] == req and msg[2].finish_reason:
                    return
            self._crash = EngineCrashed("the model worker did not stop; it was shut down")
            self._finalizer()
        except EngineCrashed:
            pass

    def cancel(self) -> None:
        if self.parallel > 1:  # every answer in flight (a WorkerAnswer cancels itself alone)
            for req in list(self._routes):
                self._stop(req)
            return
        req = self._current
        if req and self._crash is None and not self._closed:
            self._stop(req)

    def end_thinking(self) -> None:
        """End the thought of every answer in flight (a WorkerAnswer ends its own alone)."""
        for req in ([self._current] if self.parallel <= 1 else list(self._routes)):
            if req and self._crash is None and not self._closed:
                try:
                    self._send(("end_thinking", req))
                except EngineCrashed:
                    pass

    def _stop(self, req: int) -> None:
        """Ask the child to stop answer `req`, and wake its reader (which lets the answer go
        at once when the worker does not respond)."""
        self._stopping.add(req)
        try:
            self._send(("cancel", req))
        except EngineCrashed:
            pass
        inbox = self._routes.get(req, self._inbox)
        inbox.put(_WAKE)

    def close(self) -> None:
        if self._closed:
            return
        stuck = not self.liveness().responding
        self._closed = True
        if stuck:  # it cannot be asked to close: no waiting for it
            self._killed = self._killed or "it was not responding"
            try:
                self._proc.kill()
            except (OSError, ValueError, AttributeError):
                pass
        if self._current:
            self.cancel()
        self._finalizer()
        if self._crash is None:  # keep a crashed worker's log for the bug report
            try:
                os.unlink(self.log_path)
            except OSError:
                pass


class WorkerAnswer:
    """One answer of a worker with several sequences: its chunks, and `cancel()` for it alone."""

    def __init__(self, worker: WorkerEngine, req: int, chunks: Iterator[Chunk]) -> None:
        self._worker, self.req, self._chunks = worker, req, chunks

    def __iter__(self) -> "WorkerAnswer":
        return self

    def __next__(self) -> Chunk:
        return next(self._chunks)

    def cancel(self) -> None:
        worker = self._worker
        if worker._crash is None and not worker._closed and self.req in worker._routes:
            worker._stop(self.req)

    def end_thinking(self) -> None:
        worker = self._worker
        if worker._crash is None and not worker._closed and self.req in worker._routes:
            try:
                worker._send(("end_thinking", self.req))
            except EngineCrashed:
                pass

    def close(self) -> None:
        self._chunks.close()  # type: ignore[attr-defined]


def _let_go_chunk(stats: Stats) -> Chunk:
    """The end of an answer let go because its worker does not respond."""
    return Chunk(stats=replace(stats, stop_reason="cancelled"), finish_reason="cancelled")
