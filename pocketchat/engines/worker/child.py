"""The worker's child process: it loads the backend and serves the parent's requests.

See `worker` for the protocol and `process` for the launch (`run` is the entry `process.launch` starts).
One path serves every width: the backend's sequences (`sequences.Sequences`: one for the chat,
N for `serve --parallel N`) are served by as many lanes, threads that take the requests in
turn (answers, state calls, status; `lanes.Requests` says which lane takes the next); the
main thread listens, so "cancel" and "end_thinking" reach the answer they name (its own
sequence; inside a decode, llama.cpp's abort callback included) and "close" ends them all.
Lanes live as long as the process: with one
sequence every decode comes from that one OS thread (llama.cpp's CPU backend keeps a thread
pool per calling thread); with several the batcher's step thread runs them (`batcher.Batcher`)
and is the first lane itself, so a lone conversation decodes in the thread that answers it.
Deltas are coalesced: the first chunk of an answer
goes at once (time to first token), then at most one every `chunk_interval` seconds
(FLUSH_SECONDS unless the parent asks for another: the chat asks for its screen's pace).
While a long prompt is read, its progress chunks (one per piece of the prompt) pass the same
way: the first at once, and the first token after them at once too.
A beat thread (`Beat`) sends ("beat",) every `liveness.BEAT_SECONDS` while the model loads or
a request is in flight (from when it arrives until it is handled, an answer's settling
included), so the parent knows within seconds when this process stops answering (see
`liveness`); with nothing in flight it sleeps, and the parent does not judge its silence then.
"""

from __future__ import annotations

import importlib
import inspect
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from pocketchat.errors import BackendMissing, EngineError, PocketchatError
from pocketchat.engines.worker.lanes import ANSWERS, Requests, front_jobs
from pocketchat.engines.worker.liveness import BEAT_SECONDS
from pocketchat.engines.batch.sequences import Sequences
from pocketchat.engines.types import Answer, ChatOptions, Chunk, Engine, Message, Stats
from pocketchat.types import LoadPlan

FLUSH_SECONDS = 0.03
# Answers the engine settles after their last chunk (base.EngineBase._settle): a tool-call
# answer too, so that an agent's next step evaluates only the tool results.
SETTLED = ("stop", "length", "tool_calls")
PROGRESS_SECONDS = 0.1
REQUESTS = (*ANSWERS, "save_state", "load_state", "status", "park")  # taken in turn by a lane
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
    if plan.parallel > 1:
        engines = engine.sequence_engines()  # one where the backend cannot batch this model
        if len(engines) > 1:
            return Sequences(engines, engine.batcher)
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


def main(conn: Any, plan: LoadPlan, path: str, name: str | None,
         chunk_interval: float = FLUSH_SECONDS) -> None:
    """The child process (its output already the worker's log: `process.launch`): load the
    backend, say so, then serve requests until "close"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    send_lock = threading.Lock()

    def send(msg: tuple) -> None:
        with send_lock:
            conn.send(msg)

    beat = Beat(send)  # busy from the start: the load
    threading.Thread(target=beat.run, name="pocketchat-beat", daemon=True).start()
    engine = _load(plan, path, name, send)
    if engine is not None:
        send(("ready", engine.info))
    beat.end()
    if engine is not None:
        _serve(engine, conn, send, chunk_interval, beat)


class Beat:
    """Tell the parent this process still runs, every `interval` seconds while something is in
    flight (`begin` ... `end`, nested; the load counts as one), until the pipe closes. llama.cpp's
    native calls release the GIL (ctypes), so a long decode does not hold it back. Idle, the
    thread waits without a timeout; the first request after it beats at once."""

    def __init__(self, send: Callable[[tuple], None], interval: float = BEAT_SECONDS) -> None:
        self._send, self.interval = send, interval
        self._cond = threading.Condition(threading.Lock())
        self._busy = 1
        self._woken = False

    def begin(self) -> None:
        with self._cond:
            self._busy += 1
            if self._busy == 1:
                self._woken = True
                self._cond.notify()

    def end(self) -> None:
        with self._cond:
            self._busy = max(0, self._busy - 1)

    def run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._busy > 0)
                woken, self._woken = self._woken, False
            if not woken:
                time.sleep(self.interval)
                with self._cond:
                    if self._busy == 0:  # ended meanwhile: nothing in flight to vouch for
                        continue
            try:
                self._send(("beat",))
            except Exception:  # noqa: BLE001 - the parent is gone: nothing to tell
                return


def run(conn: Any) -> None:
    """The entry of a worker launched as its own interpreter (`process.launch`): its
    arguments come over `conn`; stdout and stderr are already the worker's log."""
    plan, path, name, chunk_interval = conn.recv()
    main(conn, plan, path, name, chunk_interval)


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
           chunk_interval: float = FLUSH_SECONDS, beat: Beat | None = None) -> None:
    """Serve the parent's requests until "close" (see the module docstring); `beat` runs
    from a request's arrival until it is handled."""
    engines = engine if isinstance(engine, Sequences) else Sequences([engine])
    batcher = engines.batcher if engines.batcher is not None and not engines.batcher.solo else None
    requests = Requests(front=batcher is not None,
                        wake=batcher.wake if batcher is not None else None)
    cancelled: set[int] = set()
    answers: dict[int, Answer] = {}  # req -> the answer in flight (cancelled alone)

    def handle(msg: tuple, delivered: Callable[[], None] | None = None) -> bool:
        try:
            return _handle(engines, msg, send, cancelled, answers, chunk_interval, delivered)
        finally:
            if beat is not None:
                beat.end()

    if batcher is not None:  # the step thread is the first lane
        batcher.serve(front_jobs(requests, lambda msg: handle(msg, requests.delivered)))
    lanes = [threading.Thread(target=_lane, args=(requests, handle), daemon=True,
                              name=f"pocketchat-lane-{i}")
             for i in range(1 if batcher is not None else 0, engines.sequences)]
    for lane in lanes:
        lane.start()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone (killed, or ended by Ctrl-C): nobody
            os._exit(0)  # reads what this process would write; its memory is freed now, not
            # after the step in flight (disk-tier files are renamed whole, so none is torn)
        if msg[0] in REQUESTS:
            if beat is not None:
                beat.begin()
            requests.put(msg)
        elif msg[0] == "cancel":
            cancelled.add(msg[1])
            answer = answers.get(msg[1])
            if answer is not None:
                answer.cancel()
        elif msg[0] == "end_thinking":
            answer = answers.get(msg[1])
            if answer is not None:
                answer.end_thinking()
        else:
            break
    engines.cancel()
    requests.close()
    for lane in lanes:
        lane.join(10)
    engines.close()  # the step thread ends with the batcher


def park(engines: Sequences) -> int:
    """Before the worker ends for an idle unload: each idle sequence's live state and what the
    prompt cache holds in RAM, written to its disk tier (`PromptCache.keep_all`), so the next
    worker reads only what the disk does not have; the states written. A sequence still
    answering is left as it is."""
    cache = getattr(engines.engines[0], "prompt_cache", None)
    if cache is None or not hasattr(cache, "keep_all"):
        return 0
    held, lives = [], []
    try:
        for engine in engines.engines:
            busy = getattr(engine, "_busy", None)
            if getattr(engine, "cache", None) is None or busy is None or not busy.acquire(blocking=False):
                continue
            held.append(busy)
            lives.append((engine.cache, bool(getattr(engine, "_settled", False))))
        return cache.keep_all(lives)
    finally:
        for busy in held:
            busy.release()


def _lane(requests: Requests, handle: Callable[[tuple], bool]) -> None:
    """Take requests until there are none or the parent is gone."""
    while (msg := requests.take()) is not None and handle(msg):
        pass


def _handle(engines: Sequences, msg: tuple, send: Callable[[tuple], None], cancelled: set[int],
            answers: dict[int, Answer], chunk_interval: float,
            delivered: Callable[[], None] | None = None) -> bool:
    """One request: an answer (streamed), or a state call or status (its result, or the
    error it raised); False when the parent is gone."""
    if msg[0] not in ANSWERS:  # ("save_state" | "load_state", req, path), ("status" | "park", req)
        try:
            result: Any = park(engines) if msg[0] == "park" else getattr(engines, msg[0])(*msg[2:])
        except Exception as exc:  # noqa: BLE001 - the caller gets the error
            result = exc if isinstance(exc, PocketchatError) else EngineError(str(exc))
        try:
            send(("result", msg[1], result))
        except (BrokenPipeError, EOFError, OSError):
            return False
        return True
    kind, req, messages, options = msg
    try:
        _stream(engines, req, messages, options, send, cancelled, chunk_interval, kind,
                answers, delivered)
    except (BrokenPipeError, EOFError, OSError):
        return False
    finally:
        answers.pop(req, None)
        cancelled.discard(req)
    return True


def _stream(engine: Engine, req: int, messages: Sequence[Message] | str | Sequence[int],
            options: ChatOptions, send: Callable[[tuple], None], cancelled: set[int],
            chunk_interval: float = FLUSH_SECONDS, kind: str = "chat",
            answers: dict[int, Answer] | None = None,
            delivered: Callable[[], None] | None = None) -> None:
    """Send one answer's chunks (`kind` "chat": to `messages`; "complete": a raw prompt),
    coalesced; `answers` holds the answer while it runs (the listener cancels it there);
    `delivered()` is called just before its last chunk is sent (the engine settles after)."""
    if req in cancelled:
        if delivered is not None:
            delivered()
        send(("chunk", req, Chunk(finish_reason="cancelled")))
        return
    pending: list[Chunk] = []
    last_flush = 0.0
    first = True
    answer: Answer | None = None
    try:
        try:
            answer = (engine.complete if kind == "complete" else engine.chat)(messages, options)
            if answers is not None:
                answers[req] = answer
            if req in cancelled:
                answer.cancel()
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
                    answer.cancel()
        except Exception as exc:  # noqa: BLE001 - the answer ends with the error, the worker lives
            pending.append(Chunk.failed(exc, pending[-1].stats if pending else None))
        if not pending or pending[-1].finish_reason is None:
            pending.append(Chunk(stats=pending[-1].stats if pending else Stats(), finish_reason="error",
                                 error="the engine ended the answer without a finish reason"))
        if delivered is not None:  # before the parent can hear of it and send the next turn
            delivered()
        send(("chunk", req, _merge(pending)))
        if answer is not None and pending[-1].finish_reason in SETTLED:
            try:  # the engine readies its cache for the next turn (base.EngineBase._settle)
                for _ in answer:
                    pass
            except Exception:  # noqa: BLE001 - the answer is already delivered
                pass
    finally:
        if answer is not None:
            answer.close()  # its guard and sequence are free again at once, however the answer ended
