"""The engine in a child process: `WorkerEngine` implements `Engine` over a pipe.

Why: a busy Python thread in the same process (the Textual UI) starves the generation loop
of the GIL (75 -> 17 tok/s measured here), and a native crash in llama.cpp would take the chat
with it. So the backend runs in a `spawn`ed child; the parent only reads chunks.

Protocol (pickled tuples over one duplex pipe):
  parent -> child   ("chat", req, messages, options) | ("cancel", req) | ("close",)
                    | ("save_state" | "load_state", req, path)
  child -> parent   ("progress", stage, fraction) | ("ready", EngineInfo)
                    | ("load_error", PocketchatError) | ("chunk", req, Chunk)
                    | ("result", req, value or PocketchatError)
The child coalesces deltas: it sends the first chunk of an answer at once (time to first
token) and then at most one chunk every FLUSH_SECONDS, so the pipe costs the generation loop
one small send per ~30 ms, not one per token. A child thread listens for cancel, so cancel
reaches llama.cpp (its abort callback included) while the main thread is inside a decode.

Loading: the constructor blocks until the model is loaded (default), or returns at once with
`wait=False`; then call `wait_ready(timeout)` (it reports `on_progress(stage, fraction)`),
read `progress`, and use the engine once it returns True. Load errors are re-raised in the
parent as the same pocketchat error, fields and hint included (errors pickle whole). If the child dies
(abort, segfault, kill -9, out of memory), the caller gets `EngineCrashed` with the exit code
or signal name; the messages passed to `chat()` are never modified, and a new engine can be
opened at once.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import multiprocessing
import os
import multiprocessing.connection
import queue
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pocketchat.errors import BackendMissing, EngineCrashed, EngineError, PocketchatError
from pocketchat.engines.types import ChatOptions, Chunk, EngineInfo, Message, Stats
from pocketchat.types import LoadPlan

FLUSH_SECONDS = 0.03
_WORKER_IDS = itertools.count(1)
PROGRESS_SECONDS = 0.1
BACKENDS = {
    "llama.cpp": ("pocketchat.engines.llamacpp.engine", "LlamaCppEngine"),
    "mlx": ("pocketchat.engines.mlx.engine", "MlxEngine"),
}


# -- the child ------------------------------------------------------------------------------


def make_backend(plan: LoadPlan, path: Path, name: str | None,
                 on_progress: Callable[[str, float], None] | None = None) -> Any:
    """The in-process engine for `plan.backend` (imported by name, only when used)."""
    if plan.backend not in BACKENDS:
        raise EngineError(f"unknown backend {plan.backend!r}; use llama.cpp or mlx")
    module_name, class_name = BACKENDS[plan.backend]
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise BackendMissing(
            f"the {plan.backend} backend is not available ({exc})",
            hint="Install it, or choose the other backend with --backend.",
        ) from exc
    kwargs: dict[str, Any] = {"name": name}
    if on_progress is not None and "on_progress" in inspect.signature(cls).parameters:
        kwargs["on_progress"] = on_progress
    return cls(plan, path, **kwargs)


def _merge(chunks: list[Chunk]) -> Chunk:
    last = chunks[-1]
    if len(chunks) == 1:
        return last
    return Chunk(
        text="".join(c.text for c in chunks),
        thinking="".join(c.thinking for c in chunks),
        stats=last.stats,
        finish_reason=last.finish_reason,
        error=last.error,
        failure=last.failure,
    )


def _redirect_output(log_path: str | None) -> None:
    """Send the child's stdout/stderr (native logs, warnings, abort messages) to a log file.

    Done at the descriptor level, so C code writing to fd 1/2 cannot draw over the chat.
    """
    if not log_path:
        return
    try:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)


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


def _child_main(conn: Any, plan: LoadPlan, path: str, name: str | None,
                log_path: str | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    _redirect_output(log_path)
    send_lock = threading.Lock()

    def send(msg: tuple) -> None:
        with send_lock:
            conn.send(msg)

    last_progress = [0.0, ""]

    def progress(stage: str, fraction: float) -> None:
        now = time.monotonic()
        if stage != last_progress[1] or now - last_progress[0] >= PROGRESS_SECONDS:
            last_progress[:] = [now, stage]
            send(("progress", stage, fraction))

    try:
        engine = make_backend(plan, Path(path), name, progress)
    except PocketchatError as exc:
        send(("load_error", exc))
        return
    except BaseException as exc:  # noqa: BLE001 - anything else is reported, not printed
        send(("load_error", EngineError(f"loading failed: {type(exc).__name__}: {exc}")))
        return
    send(("ready", engine.info))

    requests: queue.Queue = queue.Queue()
    cancelled: set[int] = set()
    current = [0]

    def listen() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                msg = ("close",)
            if msg[0] in ("chat", "save_state", "load_state"):
                requests.put(msg)
            elif msg[0] == "cancel":
                cancelled.add(msg[1])
                if current[0] == msg[1]:
                    engine.cancel()
            else:
                cancelled.add(current[0])
                engine.cancel()
                requests.put(None)
                return

    threading.Thread(target=listen, name="pocketchat-listen", daemon=True).start()
    while (msg := requests.get()) is not None:
        if msg[0] != "chat":  # ("save_state" | "load_state", req, path): one result back
            try:
                result: Any = getattr(engine, msg[0])(msg[2])
            except Exception as exc:  # noqa: BLE001 - the caller gets the error
                result = exc if isinstance(exc, PocketchatError) else EngineError(str(exc))
            send(("result", msg[1], result))
            continue
        _, req, messages, options = msg
        current[0] = req
        try:
            _stream(engine, req, messages, options, send, cancelled)
        except (BrokenPipeError, EOFError, OSError):
            break
        finally:
            current[0] = 0
            cancelled.discard(req)
    engine.close()


def _stream(engine: Any, req: int, messages: Sequence[Message], options: ChatOptions,
            send: Callable[[tuple], None], cancelled: set[int]) -> None:
    if req in cancelled:
        send(("chunk", req, Chunk(finish_reason="cancelled")))
        return
    pending: list[Chunk] = []
    last_flush = 0.0
    first = True
    answer = None
    try:
        answer = engine.chat(messages, options)
        for chunk in answer:
            pending.append(chunk)
            if chunk.finish_reason is not None:
                break
            now = time.monotonic()
            if first or now - last_flush >= FLUSH_SECONDS:
                send(("chunk", req, _merge(pending)))
                pending, last_flush, first = [], now, False
            if req in cancelled:
                engine.cancel()
    except Exception as exc:  # noqa: BLE001 - the answer ends with the error, the worker lives
        pending.append(Chunk.failed(exc, pending[-1].stats if pending else None))
    if not pending or pending[-1].finish_reason is None:
        pending.append(Chunk(stats=pending[-1].stats if pending else Stats(), finish_reason="error",
                             error="the engine ended the answer without a finish reason"))
    send(("chunk", req, _merge(pending)))
    if answer is not None and pending[-1].finish_reason in ("stop", "length"):
        try:  # the engine readies its cache for the next turn (base.EngineBase._settle)
            for _ in answer:
                pass
        except Exception:  # noqa: BLE001 - the answer is already delivered
            pass


# -- the parent -----------------------------------------------------------------------------


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        why = {"SIGKILL": " (killed; often the out-of-memory killer)", "SIGSEGV": " (a crash in the backend)",
               "SIGABRT": " (the backend aborted)"}.get(sig, "")
        return f"was stopped by {sig}{why}"
    return f"exited with code {exitcode}"


def _reap(proc: Any, conn: Any) -> None:
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


class WorkerEngine:
    """An `Engine` whose backend runs in a child process (see the module docstring)."""

    def __init__(self, plan: LoadPlan, path: Path, *, name: str | None = None, wait: bool = True,
                 timeout: float | None = None,
                 on_progress: Callable[[str, float], None] | None = None) -> None:
        path = Path(path)
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        from pocketchat.paths import settings

        # One log per worker: a restarted engine never truncates or deletes a crashed one's.
        self.log_path = str(settings().cache_dir / f"worker-{os.getpid()}-{next(_WORKER_IDS)}.log")
        self._proc = ctx.Process(target=_child_main,
                                 args=(child, plan, str(path), name, self.log_path),
                                 name="pocketchat-engine", daemon=True)
        self._proc.start()
        child.close()
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
            message = f"the model worker {describe_exit(code)} {when}"
            tail = log_tail(self.log_path)
            if tail:
                message += f"; its last output: {tail} (full log: {self.log_path})"
            self._crash = EngineCrashed(message, exitcode=code)
        return self._crash

    def _recv(self, timeout: float | None = None, when: str = "") -> tuple | None:
        """The next message, None on timeout; EngineCrashed when the child is gone."""
        if self._crash is not None:
            raise self._crash
        ready = multiprocessing.connection.wait([self._conn, self._proc.sentinel], timeout)
        if not ready:
            return None
        if self._conn in ready or self._conn.poll():
            try:
                return self._conn.recv()
            except (EOFError, OSError):
                pass
        raise self._crashed(when)

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
                return False
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
             ) -> Iterator[Chunk]:
        snapshot = tuple(Message(m.role, m.content) for m in messages)
        return self._chat(snapshot, options or ChatOptions())

    def _chat(self, messages: tuple[Message, ...], options: ChatOptions) -> Iterator[Chunk]:
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self.ready:
            self.wait_ready()
        if not self._chat_lock.acquire(blocking=False):
            raise EngineError("the engine is already answering; cancel that answer first")
        finished = False
        try:
            self._req += 1
            req = self._current = self._req
            self._send(("chat", req, messages, options))
            while True:
                msg = self._recv(None, "while answering")
                if msg is not None and msg[0] == "chunk" and msg[1] == req:
                    chunk: Chunk = msg[2]
                    finished = chunk.finish_reason is not None
                    yield chunk
                    if finished:
                        return
        finally:
            self._current = 0
            if not finished and self._crash is None:
                self._abandon(req)
            self._chat_lock.release()

    def save_state(self, path: Path) -> int:
        """The backend's `save_state` in the worker (see `base.EngineBase.save_state`)."""
        return self._call("save_state", Path(path))

    def load_state(self, path: Path) -> str | None:
        """The backend's `load_state` in the worker (see `base.EngineBase.load_state`)."""
        return self._call("load_state", Path(path))

    def _call(self, name: str, arg: Any) -> Any:
        if self._closed:
            raise EngineError("the engine is closed", hint="Open the model again.")
        if not self.ready:
            self.wait_ready()
        if not self._chat_lock.acquire(blocking=False):
            raise EngineError("the engine is answering; save or load its state after the answer")
        try:
            self._req += 1
            req = self._req
            self._send((name, req, arg))
            while True:
                msg = self._recv(None, f"during {name}")
                if msg is not None and msg[0] == "result" and msg[1] == req:
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
                msg = self._recv(max(0.0, deadline - time.monotonic()))
                if msg is None:
                    break
                if msg[0] == "chunk" and msg[1] == req and msg[2].finish_reason:
                    return
            self._crash = EngineCrashed("the model worker did not stop; it was shut down")
            self._finalizer()
        except EngineCrashed:
            pass

    def cancel(self) -> None:
        req = self._current
        if req and self._crash is None and not self._closed:
            try:
                self._send(("cancel", req))
            except EngineCrashed:
                pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._current:
            self.cancel()
        self._finalizer()
        if self._crash is None:  # keep a crashed worker's log for the bug report
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
