"""The one engine behind the server: loaded in the background, `sequences` answers at a time.

`EngineHost` owns the engine (a `worker.WorkerEngine` in practice: the model runs in its own
process, so the server's event loop never competes with it for the GIL) and the threads that
open it and iterate its answers. Requests take turns through a FIFO semaphore of `sequences`
places (`serve --parallel N`: N sequences decoded together; the places are set when the engine
has loaded, before any request takes one: fewer when its `info.sequences` is less, e.g. an MLX
model whose caches cannot be batched, and /health says why); at most `queue_size` wait behind
those that run, the next
gets `ApiError` 429 with a Retry-After estimated from recent answers. `turn()` holds the engine for one request (its `n`
answers run one after another: `turn.Turn`); `Turn.answer()` and `generate()` are async context
managers: whoever leaves one early (a client that went away) cancels that answer in the engine
at once, and the turn passes on only when the engine has really stopped. An engine that crashed is
closed and opened again before the next answer; /health says "loading" meanwhile. The
engine's live figures (`status()`: its prompt cache) are asked after each answer, in the
engine thread, and /health shows the latest.
`close_doors()` (the server stopping) ends the answer in progress and turns away the requests
still waiting.
A worker that stops answering (SIGSTOP, stuck, a swap storm: `types.liveness_of`, checked every
LIVENESS_POLL seconds while an answer runs or waits, and from the moment one is admitted) is
"not_responding" on /health within 2 s of an answer in flight: the answers in flight end at
once with a 503 (`model_not_responding`, or an error event in a stream), new requests get the
same 503; when it resumes the host is "ready" again, and after `restart_stuck` seconds without
it resuming the worker is killed and the model loaded again (`restarts` counts it). With
nothing running or waiting the watcher wakes every IDLE_POLL seconds only (a stopped worker is
still seen then), and not at all once the model is unloaded, until a request comes.
With `idle_unload`, a model idle that long is unloaded (`_unload`): the worker first writes
its live states and the prompt cache's RAM tier to the disk tier (`park`), so the next
request, which loads it again, reads only what the disk tier does not have.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable, Literal

import anyio

from pocketchat.engines.types import (Engine, Liveness, WatchedEngine,
                                      liveness_of)
from pocketchat.errors import ApiError, EngineNotResponding, PocketchatError
from pocketchat.server.turn import Streamed, Turn, not_responding, stopping

# "idle": the model was unloaded after `idle_unload` seconds without a request; the next
# request loads it again (it answers, after the load: /health says 200).
State = Literal["loading", "ready", "error", "not_responding", "idle"]
LIVENESS_POLL = 0.25  # how often the host asks whether the worker responds, while busy
IDLE_POLL = 1.0  # how often it asks (and looks for an idle unload) while nothing runs or waits
PARK_TIMEOUT = 120.0  # seconds the worker may take to park its states before an unload
RESTART_STUCK = 30.0  # seconds a worker may stay not responding before it is restarted
STOP_GRACE = 0.5  # seconds the worker has to end by itself when the server stops


def on_the_second(period: float) -> float:
    """Seconds to sleep to wake on the loop clock's next multiple of `period`: timers that all
    end there (this watcher's, uvicorn's tick in `serve`) share one wakeup of the process."""
    now = asyncio.get_running_loop().time()
    return period - (now % period) or period


class EngineHost:
    """The engine, its loading state and the queue of requests waiting for it."""

    def __init__(self, opener: Callable[[], Engine], *, queue_size: int = 8, sequences: int = 1,
                 on_state: Callable[["EngineHost"], None] | None = None,
                 one_at_a_time: str | None = None, restart_stuck: float = RESTART_STUCK,
                 idle_unload: float | None = None) -> None:
        self._opener = opener
        self._on_state = on_state
        self.queue_size = queue_size
        self.sequences = max(1, sequences)  # answers at once: the places of the turn
        self.one_at_a_time = one_at_a_time  # why a backend answers one at a time, for /health
        self.state: State = "loading"
        self.previous: State = "loading"  # the state before the last change (on_state reads it)
        self.error: PocketchatError | None = None
        self.engine: Engine | None = None
        self.waiting = 0
        self.running = 0  # answers in flight
        self.restarts = 0
        # One engine thread for one slot (status asks queue behind the answer, as today);
        # with several, one per answer and one for loading and status.
        self._executor = ThreadPoolExecutor(max_workers=1 if self.sequences == 1 else self.sequences + 1,
                                            thread_name_prefix="pocketchat-engine")
        self._turn: asyncio.Semaphore | None = None
        self._loading: asyncio.Lock | None = None
        self._stopped: asyncio.Event | None = None
        self._durations: deque[float] = deque(maxlen=16)
        self._crashed: Engine | None = None
        self._answers: set[Streamed] = set()
        self.closing = False
        self.engine_status: dict = {}  # the engine's latest `status()` (e.g. {"cache": ...})
        self.restart_stuck = restart_stuck
        self.stuck: Liveness | None = None  # the worker's liveness while it does not respond
        self._stuck_since = 0.0
        self._watcher: asyncio.Task | None = None
        self._admitted: asyncio.Event | None = None  # set when a request comes: watch closely
        self.idle_unload = idle_unload  # seconds without a request before the model is freed
        self.last_used = time.monotonic()  # when the last answer ended (or the model loaded)
        self.unloads = 0

    @property
    def busy(self) -> bool:
        return self.running > 0

    # -- life -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Begin loading the model in the background (call inside the server's event loop)."""
        self._turn = asyncio.Semaphore(self.sequences)
        self._loading = asyncio.Lock()
        self._stopped = asyncio.Event()
        self._admitted = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.create_task(self._load_now())
        self._watcher = loop.create_task(self._watch())

    async def _watch(self) -> None:
        assert self._admitted is not None
        while not self.closing:
            if self.running or self.waiting:
                await asyncio.sleep(LIVENESS_POLL)
            else:  # idle: a wakeup a second (none once unloaded), or at once for a request
                self._admitted.clear()
                unloaded = self.state == "idle" and self.engine is None
                try:
                    await asyncio.wait_for(self._admitted.wait(),
                                           None if unloaded else on_the_second(IDLE_POLL))
                except asyncio.TimeoutError:
                    pass
            now = time.monotonic()
            self.check_liveness(now)
            if self.due_for_unload(now):
                await self._unload()

    def due_for_unload(self, now: float) -> bool:
        """Whether the model has been idle `idle_unload` seconds: loaded, nothing running or
        waiting, the last answer that long ago."""
        return (self.idle_unload is not None and self.engine is not None and self.state == "ready"
                and self.running == 0 and self.waiting == 0
                and now - self.last_used >= self.idle_unload)

    async def _unload(self) -> None:
        """Free the model's memory: the worker parks its states to the disk tier (`_park`),
        then ends; the next request loads it again (`_ensure`). A request that comes while it
        parks keeps the model loaded."""
        assert self._loading is not None
        async with self._loading:
            engine = self.engine
            if engine is None or not self.due_for_unload(time.monotonic()):
                return
            await self._park(engine)
            if self.engine is not engine or not self.due_for_unload(time.monotonic()):
                return
            self.engine = None
            self.engine_status = {}
            self.unloads += 1
            await asyncio.get_running_loop().run_in_executor(self._executor, _ender(engine))
            self._set("idle", None)

    async def _park(self, engine: Engine) -> None:
        """Ask the engine to write what its prompt cache holds to the disk tier (`park()`,
        where it has one), in the engine thread, within PARK_TIMEOUT seconds; a failure only
        costs the next request a longer read."""
        park = getattr(engine, "park", None)
        if not callable(park):
            return
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(self._executor, park), PARK_TIMEOUT)
        except Exception:  # noqa: BLE001 - a cache: what is not parked is read again
            pass

    def check_liveness(self, now: float) -> None:
        """Follow the worker's liveness (see the module docstring); call in the event loop."""
        engine = self.engine
        if engine is None:
            return
        found = liveness_of(engine)
        if found.responding:
            if self.state == "not_responding":  # it resumed
                self.stuck = None
                self._set("ready", None)
            return
        if self.state != "not_responding":
            self._stuck_since = now
            self.stuck = found
            self._set("not_responding", EngineNotResponding(found.message))
            for answer in list(self._answers):
                answer.fail(not_responding(found, restart_in=self.restart_stuck))
        self.stuck = found
        if now - self._stuck_since >= self.restart_stuck:
            self.stuck = None
            self._engine_crashed(engine)  # killed and loaded again (`_open`)

    async def _load_now(self) -> None:
        try:
            await self._ensure()
        except ApiError:
            pass  # state and error say what happened

    async def stop(self) -> None:
        """Close the engine (the server is stopping): its worker is given STOP_GRACE seconds to
        end by itself, then stopped (one reading a long prompt answers nothing until its batch
        is done, and the server must not wait for that; one not responding is killed at once)."""
        if self._watcher is not None:
            self._watcher.cancel()
        engine, self.engine = self.engine, None
        if engine is not None:
            closer = threading.Thread(target=_ender(engine), name="pocketchat-close", daemon=True)
            closer.start()
            deadline = time.monotonic() + STOP_GRACE
            while closer.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if closer.is_alive():
                _kill_worker(engine)
        self._executor.shutdown(wait=False)

    def close_doors(self) -> None:
        """The server is stopping: the answer in progress ends now, requests that wait or
        arrive get a 503, and every endpoint answers at once (`stopped`), without waiting for
        the engine, so every connection finishes promptly."""
        self.closing = True
        if self._stopped is not None:
            self._stopped.set()
        for answer in list(self._answers):
            answer.cancel()

    async def wait_stopping(self) -> None:
        """Return when the server begins to stop (`close_doors`)."""
        assert self._stopped is not None
        await self._stopped.wait()

    def _open(self) -> Engine:
        if self._crashed is not None:
            crashed, self._crashed = self._crashed, None
            _ender(crashed)()
        return self._opener()

    async def _ensure(self) -> Engine:
        """The loaded engine; loads it (one loader at a time) when there is none."""
        if self.engine is not None:
            return self.engine
        assert self._loading is not None
        async with self._loading:
            return await self._ensure_locked()

    async def _ensure_locked(self) -> Engine:
        if self.engine is not None:
            return self.engine
        if self.state == "error" and self.error is not None:
            raise load_failed(self.error)
        if self.state == "idle":
            self._set("loading", None)  # said: the model comes back for this request
        else:
            self.state = "loading"
        try:
            with anyio.CancelScope(shield=True):  # a client gone mid-load must not orphan the engine
                self.engine = await asyncio.get_running_loop().run_in_executor(self._executor, self._open)
        except Exception as exc:  # noqa: BLE001 - reported on /health and to every request
            if not isinstance(exc, PocketchatError):
                exc = PocketchatError(f"{type(exc).__name__}: {exc}")
            self._set("error", exc)
            raise load_failed(exc) from None
        if self.restarts == 0 and self.unloads == 0:
            self._fit_sequences(self.engine)
        self.last_used = time.monotonic()
        self._set("ready", None)
        self.refresh_status()
        return self.engine

    def _fit_sequences(self, engine: Engine) -> None:
        """Fewer places when the loaded engine answers fewer at once than asked (its
        `info.sequences`); called after the first load, before any request has taken a place."""
        n = engine.info.sequences
        if not 1 <= n < self.sequences:
            return
        self.one_at_a_time = engine.info.parallel_note or f"{engine.info.backend} answers {n} at a time"
        self.sequences = n
        self._turn = asyncio.Semaphore(n)

    def refresh_status(self) -> None:
        """Ask the engine for its live figures in the engine thread (after what runs there)."""
        engine = self.engine
        if engine is None:
            return

        def ask() -> None:
            try:
                self.engine_status = dict(engine.status())
            except Exception:  # noqa: BLE001 - figures are optional; a dead engine has none
                pass

        try:
            self._executor.submit(ask)
        except RuntimeError:  # the server is stopping
            pass

    def _set(self, state: State, error: PocketchatError | None) -> None:
        self.previous = self.state
        self.state, self.error = state, error
        if self._on_state is not None:
            self._on_state(self)

    def _engine_crashed(self, engine: Engine) -> None:
        """Forget the dead engine; the next turn (or the reload queued here) opens a new one."""
        if self.engine is not engine:  # another answer on it has reported the crash already
            return
        self._crashed, self.engine = self.engine, None
        self.previous, self.state, self.error = self.state, "loading", None
        self.restarts += 1
        asyncio.get_running_loop().create_task(self._load_now())

    # -- requests -------------------------------------------------------------------------

    def retry_after(self) -> int:
        """Seconds until a place in the queue is likely free: the recent mean answer time."""
        per = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, min(600, math.ceil(per)))

    def _admit(self) -> None:
        if self._turn is None:
            raise ApiError("the server is not started", status=503, type="server_error")
        if self.closing:
            raise stopping()
        if self.state == "error" and self.error is not None:
            raise load_failed(self.error)
        if self.state == "not_responding" and self.stuck is not None:
            raise not_responding(self.stuck, restart_in=self._restart_in())
        if self.waiting >= self.queue_size:
            raise ApiError(
                f"the server is busy: {self.waiting} requests are waiting for the model",
                status=429, type="rate_limit_error", code="queue_full",
                headers={"Retry-After": str(self.retry_after())},
                hint="Try again after the time in the Retry-After header.",
            )

    @asynccontextmanager
    async def turn(self) -> AsyncIterator["Turn"]:
        """Wait for a turn (one of `sequences`, bounded queue); answers asked within it run one
        after another (a request's `n` choices) on one place."""
        self._admit()
        assert self._turn is not None
        self.waiting += 1
        if self._admitted is not None:
            self._admitted.set()  # the watcher polls closely from now on
        try:
            if self.engine is None and self.restarts == 0 and self.sequences > 1:
                await self._ensure()  # the first load sets the places (`_fit_sequences`)
            places = self._turn
            await places.acquire()
        finally:
            self.waiting -= 1
        started = time.monotonic()
        turn = Turn(self)
        try:
            if self.closing:
                raise stopping()
            yield turn
        finally:
            if turn.answers:
                self._durations.append(time.monotonic() - started)
            self.last_used = time.monotonic()
            places.release()

    def health(self) -> dict:
        body: dict = {"status": self.state, "busy": self.busy, "queued": self.waiting,
                      "slots": {"total": self.sequences, "busy": self.running},
                      "queue_size": self.queue_size, "restarts": self.restarts,
                      **self.engine_status}
        if self.one_at_a_time:
            body["parallel_note"] = self.one_at_a_time
        if self.idle_unload is not None:
            body["idle_unload_seconds"] = self.idle_unload
            body["model_loaded"] = self.engine is not None
            body["unloads"] = self.unloads
        if self.error is not None:
            body["error"] = self.error.message
        if self.state == "not_responding" and self.stuck is not None:
            body["not_responding"] = {"reason": self.stuck.reason,
                                      "silent_seconds": round(self.stuck.silent_seconds, 1),
                                      "restart_in_seconds": round(self._restart_in(), 1)}
        return body

    def _restart_in(self) -> float:
        return max(0.0, self._stuck_since + self.restart_stuck - time.monotonic())


def _kill_worker(engine: Engine) -> None:
    """End the engine's worker process now (the server is exiting and it did not stop): by
    its pid, since `kill()` would wait for the close under way."""
    pid = getattr(engine, "pid", None)
    if isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _ender(engine: Engine) -> Callable[[], None]:
    """How to end an engine: `kill()` for a worker that does not respond (it cannot be asked
    to close), else `close()`."""
    if isinstance(engine, WatchedEngine) and not engine.liveness().responding:
        return engine.kill
    return engine.close


def load_failed(exc: PocketchatError) -> ApiError:
    return ApiError(f"the model could not be loaded: {exc.message}", status=503, type="server_error",
                    code="model_load_failed", hint=exc.hint or None)
