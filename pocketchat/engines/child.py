"""The worker's child process: it loads the backend and serves the parent's requests.

See `worker` for the launch and the protocol (`run` is the entry `worker.launch` starts). Requests run one at a time in the main thread; a listener
thread takes "cancel" and "close" while an answer runs, so cancel reaches the backend (its
abort callback included) inside a decode. A backend with several sequences (`slots.Slots`,
a plan with `parallel` N > 1) answers each chat in its own thread, up to N at once; a cancel
reaches that answer alone. Deltas are coalesced: the first chunk of an answer
goes at once (time to first token), then at most one every `chunk_interval` seconds
(FLUSH_SECONDS unless the parent asks for another: the chat asks for its screen's pace).
While a long prompt is read, its progress chunks (one per piece of the prompt) pass the same
way: the first at once, and the first token after them at once too.
A beat thread sends ("beat",) every `liveness.BEAT_SECONDS` from the start, loading included,
so the parent knows within seconds when this process stops answering (see `liveness`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from pocketchat.errors import BackendMissing, EngineError, PocketchatError
from pocketchat.engines.liveness import BEAT_SECONDS
from pocketchat.engines.types import ChatOptions, Chunk, Message, Stats
from pocketchat.types import LoadPlan

FLUSH_SECONDS = 0.03
# Answers the engine settles after their last chunk (base.EngineBase._settle): a tool-call
# answer too, so that an agent's next step evaluates only the tool results.
SETTLED = ("stop", "length", "tool_calls")
PROGRESS_SECONDS = 0.1
BACKENDS = {
    "llama.cpp": ("pocketchat.engines.llamacpp.engine", "LlamaCppEngine"),
    "mlx": ("pocketchat.engines.mlx.engine", "MlxEngine"),
}



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
    engine = cls(plan, path, **kwargs)
    if plan.parallel > 1 and hasattr(engine, "sequence_engines"):
        engines = engine.sequence_engines()  # one where the backend cannot batch this model
        if len(engines) > 1:
            from pocketchat.engines.slots import Slots

            return Slots(engines)
    return engine


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
        tool_calls=tuple(t for c in chunks for t in c.tool_calls),
        logprobs=tuple(p for c in chunks for p in c.logprobs),
        progress=last.progress,  # only while the prompt is read: text ends it
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


def main(conn: Any, plan: LoadPlan, path: str, name: str | None,
         log_path: str | None = None, chunk_interval: float = FLUSH_SECONDS) -> None:
    """The child process: load the backend, say so, then serve requests until "close"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    _redirect_output(log_path)
    send_lock = threading.Lock()

    def send(msg: tuple) -> None:
        with send_lock:
            conn.send(msg)

    threading.Thread(target=_beat, args=(send,), name="pocketchat-beat", daemon=True).start()
    engine = _load(plan, path, name, send)
    if engine is not None:
        send(("ready", engine.info))
        _serve(engine, conn, send, chunk_interval)


def _beat(send: Callable[[tuple], None], interval: float = BEAT_SECONDS) -> None:
    """Tell the parent this process still runs, every `interval` seconds, until the pipe closes.
    llama.cpp's native calls release the GIL (ctypes), so a long decode does not hold it back."""
    while True:
        time.sleep(interval)
        try:
            send(("beat",))
        except Exception:  # noqa: BLE001 - the parent is gone: nothing to tell
            return


def run(conn: Any) -> None:
    """The entry of a worker launched as its own interpreter (`worker.launch`): its
    arguments come over `conn`; stdout and stderr are already the worker's log."""
    plan, path, name, chunk_interval = conn.recv()
    main(conn, plan, path, name, None, chunk_interval)


def _load(plan: LoadPlan, path: str, name: str | None, send: Callable[[tuple], None]) -> Any:
    """The backend, loaded with its progress sent; None after sending why it did not load."""
    last_progress = [0.0, ""]

    def progress(stage: str, fraction: float) -> None:
        now = time.monotonic()
        if (stage != last_progress[1] or fraction >= 1.0
                or now - last_progress[0] >= PROGRESS_SECONDS):  # the end always goes
            last_progress[:] = [now, stage]
            send(("progress", stage, fraction))

    try:
        return make_backend(plan, Path(path), name, progress)
    except PocketchatError as exc:
        send(("load_error", exc))
    except BaseException as exc:  # noqa: BLE001 - anything else is reported, not printed
        send(("load_error", EngineError(f"loading failed: {type(exc).__name__}: {exc}")))
    return None


def _serve(engine: Any, conn: Any, send: Callable[[tuple], None],
           chunk_interval: float = FLUSH_SECONDS) -> None:
    """Answer requests one at a time; a listener thread takes cancel and close at any time."""
    requests: queue.Queue = queue.Queue()
    cancelled: set[int] = set()
    current = [0]
    if getattr(engine, "sequences", 1) > 1:
        _serve_parallel(engine, conn, send, chunk_interval)
        return

    def listen() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                msg = ("close",)
            if msg[0] in ("chat", "complete", "save_state", "load_state", "status"):
                requests.put(msg)
            elif msg[0] == "cancel":
                cancelled.add(msg[1])
                if current[0] == msg[1]:
                    engine.cancel()
            elif msg[0] == "end_thinking":
                if current[0] == msg[1]:
                    engine.end_thinking()
            else:
                cancelled.add(current[0])
                engine.cancel()
                requests.put(None)
                return

    threading.Thread(target=listen, name="pocketchat-listen", daemon=True).start()
    while (msg := requests.get()) is not None:
        if msg[0] not in ("chat", "complete"):  # ("save_state" | "load_state", req, path), ("status", req)
            try:
                result: Any = getattr(engine, msg[0])(*msg[2:])
            except Exception as exc:  # noqa: BLE001 - the caller gets the error
                result = exc if isinstance(exc, PocketchatError) else EngineError(str(exc))
            send(("result", msg[1], result))
            continue
        kind, req, messages, options = msg
        current[0] = req
        try:
            _stream(engine, req, messages, options, send, cancelled, chunk_interval, kind)
        except (BrokenPipeError, EOFError, OSError):
            break
        finally:
            current[0] = 0
            cancelled.discard(req)
    engine.close()


def _serve_parallel(engine: Any, conn: Any, send: Callable[[tuple], None],
                    chunk_interval: float) -> None:
    """Answer each chat in its own thread (the engine takes a free sequence or refuses);
    save/load state requests in this thread."""
    cancelled: set[int] = set()
    answers: dict[int, Any] = {}  # req -> the answer in flight (it can be cancelled alone)
    threads: list[threading.Thread] = []

    def run(req: int, messages: Any, options: ChatOptions, kind: str) -> None:
        try:
            _stream(engine, req, messages, options, send, cancelled, chunk_interval, kind,
                    answers)
        except (BrokenPipeError, EOFError, OSError):
            pass
        finally:
            answers.pop(req, None)
            cancelled.discard(req)

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            msg = ("close",)
        if msg[0] in ("chat", "complete"):
            kind, req, messages, options = msg
            threads = [t for t in threads if t.is_alive()]
            t = threading.Thread(target=run, args=(req, messages, options, kind), daemon=True,
                                 name=f"pocketchat-answer-{req}")
            threads.append(t)
            t.start()
        elif msg[0] == "cancel":
            cancelled.add(msg[1])
            answer = answers.get(msg[1])
            if answer is not None:
                answer.cancel()
        elif msg[0] == "end_thinking":
            answer = answers.get(msg[1])
            if answer is not None:
                answer.end_thinking()
        elif msg[0] in ("save_state", "load_state", "status"):
            try:
                result: Any = getattr(engine, msg[0])(*msg[2:])
            except Exception as exc:  # noqa: BLE001 - the caller gets the error
                result = exc if isinstance(exc, PocketchatError) else EngineError(str(exc))
            send(("result", msg[1], result))
        else:
            break
    engine.cancel()
    for t in threads:
        t.join(10)
    engine.close()


def _stream(engine: Any, req: int, messages: Sequence[Message] | str | Sequence[int],
            options: ChatOptions, send: Callable[[tuple], None], cancelled: set[int],
            chunk_interval: float = FLUSH_SECONDS, kind: str = "chat",
            answers: dict | None = None) -> None:
    """Send one answer's chunks (`kind` "chat": to `messages`; "complete": a raw prompt);
    `answers` holds the answer in flight when several run at once (cancelled alone)."""
    if req in cancelled:
        send(("chunk", req, Chunk(finish_reason="cancelled")))
        return
    pending: list[Chunk] = []
    last_flush = 0.0
    first = True
    answer = None
    try:
        try:
            answer = (engine.complete if kind == "complete" else engine.chat)(messages, options)
            cancel = getattr(answer, "cancel", engine.cancel)  # a sequence's answer: it alone
            if answers is not None:
                answers[req] = answer
                if req in cancelled:
                    cancel()
            for chunk in answer:
                pending.append(chunk)
                if chunk.finish_reason is not None:
                    break
                now = time.monotonic()
                if first or now - last_flush >= chunk_interval:
                    send(("chunk", req, _merge(pending)))
                    pending, last_flush = [], now
                    first = first and chunk.progress is not None  # the first token goes at once too
                if req in cancelled:
                    cancel()
        except Exception as exc:  # noqa: BLE001 - the answer ends with the error, the worker lives
            pending.append(Chunk.failed(exc, pending[-1].stats if pending else None))
        if not pending or pending[-1].finish_reason is None:
            pending.append(Chunk(stats=pending[-1].stats if pending else Stats(), finish_reason="error",
                                 error="the engine ended the answer without a finish reason"))
        send(("chunk", req, _merge(pending)))
        if answer is not None and pending[-1].finish_reason in SETTLED:
            try:  # the engine readies its cache for the next turn (base.EngineBase._settle)
                for _ in answer:
                    pass
            except Exception:  # noqa: BLE001 - the answer is already delivered
                pass
    finally:
        close = getattr(answer, "close", None)
        if close is not None:
            close()  # its guard and sequence are free again at once, however the answer ended
