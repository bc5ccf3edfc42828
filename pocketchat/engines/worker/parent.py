"""The engine in a child process: `WorkerEngine` implements `Engine` over a pipe.

Why: a busy Python thread in the same process (the Textual UI) starves the generation loop
of the GIL (75 -> 17 tok/s measured here), and a native crash in llama.cpp would take the chat
with it. So the backend runs in a child process (launched, read and reaped by `process`); the
parent only reads chunks.

Protocol (pickled tuples over one duplex connection):
  parent -> child   ("chat", req, messages, options) | ("complete", req, prompt, options)
                    | ("cancel", req) | ("end_thinking", req) | ("close",)
                    | ("save_state" | "load_state", req, path) | ("status" | "park", req)
  child -> parent   ("progress", stage, fraction) | ("ready", EngineInfo)
                    | ("load_error", PocketchatError) | ("chunk", req, Chunk)
                    | ("result", req, value or PocketchatError)  (status: a dict)
                    | ("beat",)  (every liveness.BEAT_SECONDS while a request is in flight,
                                from a thread of its own; paused while idle)
One path for every width: each request (an answer, a state call, status) has its own number
and its own queue (`process.Reader.routes`), and each answer is a `WorkerAnswer` that can be
cancelled alone. The child (`child._serve`) runs `info.sequences` of them at once (one for the
chat, N for `serve --parallel N`) and the rest in the order they came. It coalesces deltas:
the first chunk of an answer at once (time to first token), then at most one chunk every
`chunk_interval` seconds (FLUSH_SECONDS, 30 ms, unless the owner asks for another), so the
pipe costs the generation loop one small send per interval, not one per token. Its listener
takes cancel at any time, so cancel reaches llama.cpp (its abort callback included) inside a
decode.

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
import os
import queue
import signal
import threading
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pocketchat.errors import EngineClosed, EngineCrashed, EngineError, EngineNotResponding
from pocketchat.engines.worker.child import FLUSH_SECONDS
from pocketchat.engines.worker.liveness import BEAT_SECONDS
from pocketchat.engines.worker.process import GONE, Reader, describe_exit, launch, log_tail, reap
from pocketchat.engines.types import ChatOptions, Chunk, EngineInfo, Liveness, Message, Stats
from pocketchat.types import LoadPlan

_WORKER_IDS = itertools.count(1)
_WAKE = object()  # in a queue: a cancel: the waiting caller looks again at once
STOP_WAIT = 10.0  # seconds a caller that stopped reading waits for the child to end the answer


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
        # `info.sequences` (answers at once) is the loaded engine's: known once it is ready.
        self.info = EngineInfo(backend=plan.backend, model=name or path.stem,
                               placement=plan.describe(), n_ctx=plan.n_ctx, path=str(path))
        self.progress: tuple[str, float] = ("starting", 0.0)
        self.ready = False
        self._on_progress = on_progress
        self._crash: EngineCrashed | None = None
        self._closed = False
        self._send_lock = threading.Lock()
        self._reqs = itertools.count(1)
        self._live: set[int] = set()  # answers in flight
        self._stopping: set[int] = set()  # requests asked to stop (cancel)
        self._killed = ""  # why this engine ended its worker itself ("": it did not)
        self._reader = Reader(self._conn, self._proc)
        self._inbox, self._routes = self._reader.inbox, self._reader.routes
        self._grace = [2.0]  # seconds the worker is given to close (0 after Ctrl-C)
        self._finalizer = weakref.finalize(self, reap, self._proc, self._conn, self._grace)
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

    def _take(self, inbox: queue.SimpleQueue, when: str, timeout: float | None = BEAT_SECONDS
              ) -> tuple | None:
        """The next message of `inbox` (a request's queue, or the loading inbox), None after
        `timeout` or a cancel's wake-up (look again); EngineCrashed when the child is gone."""
        if self._crash is not None:
            raise self._crash
        try:
            msg = inbox.get(timeout=timeout)
        except queue.Empty:  # a queue made after the reader ended gets no GONE of its own
            msg = GONE if self._reader.gone.is_set() else None
        if msg is GONE:
            inbox.put(GONE)  # every later reader sees it too
            raise self._crashed(when)
        return msg if isinstance(msg, tuple) else None

    def _usable(self) -> None:
        """Before a request: open, loaded (waited for), and responding."""
        if self._closed:
            raise EngineClosed()
        if not self.ready:
            self.wait_ready()
        self._refuse_if_stuck()

    # -- liveness ---------------------------------------------------------------------------

    def liveness(self) -> Liveness:
        """Whether the worker answers (see `liveness`): sampled a few times a second while a
        request is outstanding, and when asked otherwise."""
        if self._crash is not None or self._closed or self._reader.gone.is_set():
            return Liveness()  # ended: the crash or the close says so, not this
        return self._reader.verdict()

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
            msg = self._take(self._inbox, "while loading the model", left)
            if msg is None:
                continue  # the deadline is checked above
            if msg[0] == "progress":
                self.progress = (msg[1], msg[2])
                if self._on_progress:
                    self._on_progress(msg[1], msg[2])
            elif msg[0] == "ready":
                self.info, self.ready, self.progress = msg[1], True, ("ready", 1.0)
            elif msg[0] == "load_error":
                self._proc.join(5)
                self._closed = True
                self._finalizer()
                raise msg[1]
        return True

    # -- Engine -----------------------------------------------------------------------------

    def chat(self, messages: Sequence[Message], options: ChatOptions | None = None
             ) -> "WorkerAnswer":
        snapshot = tuple(m if isinstance(m, Message) else Message(m.role, m.content)
                         for m in messages)  # frozen: the caller cannot change them later
        return self._ask("chat", snapshot, options or ChatOptions())

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> "WorkerAnswer":
        """The backend's raw continuation of `prompt` (see `base.EngineBase.complete`)."""
        sent = prompt if isinstance(prompt, str) else tuple(int(t) for t in prompt)
        return self._ask("complete", sent, options or ChatOptions())

    def _ask(self, kind: str, payload: tuple[Message, ...] | str | tuple[int, ...],
             options: ChatOptions) -> "WorkerAnswer":
        req = next(self._reqs)
        return WorkerAnswer(self, req, self._answer(req, kind, payload, options))

    def _answer(self, req: int, kind: str, payload: tuple[Message, ...] | str | tuple[int, ...],
                options: ChatOptions) -> Iterator[Chunk]:
        """One answer's chunks from its own queue. Nothing is asked before the first chunk is
        (an answer dropped unstarted leaves nothing behind); the answer is over for the engine
        before the caller sees its last chunk, whatever the caller does after."""
        finished = interrupted = False
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        try:
            self._usable()
            self._live.add(req)
            self._reader.expect(req, inbox)
            self._send((kind, req, payload, options))
            if req in self._stopping:  # cancelled before it began
                self._send(("cancel", req))
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
                if chunk.finish_reason is not None:
                    finished = True
                    self._done(req)
                    yield chunk
                    return
                yield chunk
        except KeyboardInterrupt:  # Ctrl-C: the program ends or takes over at once, never
            interrupted = True  # after the step in flight (the child drops the answer), and
            self._grace[0] = 0.0  # a program that ends takes its worker with it
            raise
        finally:
            if not finished and req in self._live and self._crash is None and not self._closed:
                self._stop_answer(req, inbox, wait=not interrupted)
            self._done(req)

    def _done(self, req: int) -> None:
        self._live.discard(req)
        self._stopping.discard(req)
        self._routes.pop(req, None)

    def _stop_answer(self, req: int, inbox: queue.SimpleQueue, *, wait: bool = True) -> None:
        """The caller stopped reading: cancel, and wait (STOP_WAIT at most, unless not to
        `wait`) until the child ended that answer (its sequence is free then; a worker that
        does not respond drops the answer if it resumes)."""
        try:
            self._send(("cancel", req))
        except EngineCrashed:
            return
        if not wait:
            return
        deadline = time.monotonic() + STOP_WAIT
        while deadline - time.monotonic() > 0 and self.liveness().responding:
            try:
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

    def park(self) -> int:
        """Write the live states and the prompt cache's RAM tier to its disk tier, before the
        worker ends for a while (`child.park`); the states written."""
        return self._call("park")

    def _call(self, name: str, *args: Any) -> Any:
        """A request with one result, taken in turn with the answers (after the answer in
        flight when the engine answers one at a time)."""
        self._usable()
        req = next(self._reqs)
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._reader.expect(req, inbox)
        try:
            self._send((name, req, *args))
            while (msg := self._take(inbox, f"during {name}")) is None:
                self._refuse_if_stuck()  # its late result is dropped (no queue for it)
            if isinstance(msg[2], BaseException):
                raise msg[2]
            return msg[2]
        finally:
            self._routes.pop(req, None)

    def cancel(self) -> None:
        """Stop every answer in flight (a `WorkerAnswer` stops itself alone)."""
        for req in list(self._live):
            self._stop(req)

    def end_thinking(self) -> None:
        """End the thought of every answer in flight (a `WorkerAnswer` ends its own alone)."""
        for req in list(self._live):
            self._end_thought(req)

    def _stop(self, req: int) -> None:
        """Ask the child to stop answer `req`, and wake its reader (which lets the answer go
        at once when the worker does not respond)."""
        self._stopping.add(req)
        if req not in self._live or self._crash is not None or self._closed:
            return  # not begun (it asks to stop when it begins), or over
        try:
            self._send(("cancel", req))
        except EngineCrashed:
            pass
        inbox = self._routes.get(req)
        if inbox is not None:
            inbox.put(_WAKE)

    def _end_thought(self, req: int) -> None:
        if req in self._live and self._crash is None and not self._closed:
            try:
                self._send(("end_thinking", req))
            except EngineCrashed:
                pass

    def close(self) -> None:
        if self._closed:
            return
        stuck = not self.liveness().responding
        if stuck:  # it cannot be asked to close: no waiting for it
            self._killed = self._killed or "it was not responding"
            try:
                self._proc.kill()
            except (OSError, ValueError, AttributeError):
                pass
        self.cancel()
        self._closed = True
        self._finalizer()
        if self._crash is None:  # keep a crashed worker's log for the bug report
            try:
                os.unlink(self.log_path)
            except OSError:
                pass


class WorkerAnswer:
    """One answer of the worker (a `types.Answer`): its chunks, stopped or hurried alone."""

    def __init__(self, worker: WorkerEngine, req: int, chunks: Iterator[Chunk]) -> None:
        self._worker, self.req, self._chunks = worker, req, chunks

    def __iter__(self) -> "WorkerAnswer":
        return self

    def __next__(self) -> Chunk:
        return next(self._chunks)

    def cancel(self) -> None:
        self._worker._stop(self.req)

    def end_thinking(self) -> None:
        self._worker._end_thought(self.req)

    def close(self) -> None:
        self._chunks.close()  # type: ignore[attr-defined]


def _let_go_chunk(stats: Stats) -> Chunk:
    """The end of an answer let go because its worker does not respond."""
    return Chunk(stats=replace(stats, stop_reason="cancelled"), finish_reason="cancelled")
