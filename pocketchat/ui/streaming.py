"""The answer in flight: a thread iterates `engine.chat()`, the UI drains it at a bounded rate.

Nothing here knows Textual. `AnswerStream.run()` runs in a worker thread: it appends each
chunk to the conversation's assistant message, saves the conversation at most once a second
(`Autosave`), and keeps the text not yet shown in a buffer; after the answer it saves the
model's state beside the conversation (`modelstate.save`). The UI calls `drain()` from a
timer (at most 10 times a second) and renders what piled up since the last call, so the
number of screen updates does not grow with the token rate.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from pocketchat.conversations import Autosave, ChatMessage, Conversation, stats_summary
from pocketchat.engines.types import ChatOptions, Engine, Message, PromptProgress, Stats
from pocketchat.conversations import modelstate
from pocketchat.ui.thinking import ThoughtClock

UPDATES_PER_SECOND = 10  # the most screen updates a second while an answer streams
CHUNK_INTERVAL = 1.0 / UPDATES_PER_SECOND  # the worker sends text no more often than it can show
# (each chunk wakes this process: at 30 ms the reading thread took 0.11 ms of CPU per token, 0.04 at 100 ms)
MIN_UPDATES_PER_SECOND = 2
RENDER_BUDGET = 0.025  # share of one core the UI process may spend while the model decodes
SAVE_INTERVAL = 1.0


@dataclass(frozen=True)
class StreamUpdate:
    """What arrived since the last drain, and where the answer stands."""

    text: str = ""
    thinking: str = ""
    stats: Stats | None = None
    done: bool = False
    finish_reason: str | None = None
    error: str | None = None
    exception: BaseException | None = None
    elapsed: float = 0.0
    first_token_at: float | None = None
    progress: PromptProgress | None = None  # the prompt is being read (no text yet)
    thought: tuple[int, float | None, str] | None = None  # the thought's figures (ThoughtClock)


class AnswerStream:
    """One answer: produced in a worker thread, consumed by the UI in batches."""

    def __init__(
        self,
        engine: Engine,
        conversation: Conversation,
        message: ChatMessage,
        messages: Sequence[Message],
        options: ChatOptions,
        save_interval: float = SAVE_INTERVAL,
        wait_engine: Callable[[], object] | None = None,
    ) -> None:
        self.engine = engine
        self.wait_engine = wait_engine  # blocks until the engine is free (a state save or load)
        self.conversation = conversation
        self.message = message
        self.messages = list(messages)
        self.options = options
        self.autosave = Autosave(conversation, save_interval)
        self.finished = threading.Event()
        self.settled = threading.Event()  # the model's state is saved: the engine is free
        self.cancelled = False
        self.thought_end_asked = False  # the user asked for the answer now
        self.thought = ThoughtClock()  # the thought's tokens, seconds and end
        self._lock = threading.Lock()
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._stats: Stats | None = None
        self._progress: PromptProgress | None = None
        self._finish: str | None = None
        self._error: str | None = None
        self._exception: BaseException | None = None
        self._started = time.monotonic()
        self._first_token: float | None = None
        self.save_error: OSError | None = None

    # -- the worker thread -------------------------------------------------------------
    def run(self) -> None:
        """Iterate the engine to the end; never raises (a failure is kept for the UI)."""
        message = self.message
        message.interrupted = True  # until the answer finishes, a saved copy says "cut short"
        self._save(force=True)
        finish: str | None = None
        error: str | None = None
        exception: BaseException | None = None
        try:
            if self.wait_engine is not None:
                self.wait_engine()
            for chunk in () if self.cancelled else self.engine.chat(self.messages, self.options):
                with self._lock:
                    if (chunk.text or chunk.thinking) and self._first_token is None:
                        self._first_token = time.monotonic()
                    if chunk.text:
                        self._text.append(chunk.text)
                        message.content += chunk.text
                    if chunk.thinking:
                        self._thinking.append(chunk.thinking)
                        message.thinking += chunk.thinking
                    if chunk.tool_calls:  # run once the answer ends (ui/toolcalls.py)
                        message.tool_calls += chunk.tool_calls
                    self._stats = chunk.stats
                    self._progress = chunk.progress
                    self.thought.feed(chunk)
                message.stats = stats_summary(chunk.stats) | self.thought.saved()
                if chunk.finish_reason is not None:
                    finish, error = chunk.finish_reason, chunk.error
                    break
                self._save()
        except BaseException as exc:  # noqa: BLE001 - any failure becomes a message in the chat
            exception = exc
            finish = "error"
        if finish is None:
            finish = "cancelled" if self.cancelled else "stop"
        message.interrupted = finish in ("cancelled", "error") or self.cancelled
        self._save(force=True)
        with self._lock:
            self._finish, self._error, self._exception = finish, error, exception
        self.finished.set()
        if finish != "error":  # the answer is on screen; its state is saved while the user reads
            modelstate.save(self.engine, self.conversation)
        self.settled.set()

    def _save(self, force: bool = False) -> None:
        try:
            if force:
                self.autosave.flush()
            else:
                self.autosave.touch()
        except OSError as exc:  # a full disk must not stop the answer; the UI says so
            self.save_error = exc

    # -- the UI thread ----------------------------------------------------------------------
    def drain(self) -> StreamUpdate:
        """Everything that arrived since the last call."""
        with self._lock:
            text, thinking = "".join(self._text), "".join(self._thinking)
            self._text.clear()
            self._thinking.clear()
            done = self.finished.is_set()
            return StreamUpdate(
                text=text,
                thinking=thinking,
                stats=self._stats,
                done=done,
                finish_reason=self._finish if done else None,
                error=self._error if done else None,
                exception=self._exception if done else None,
                elapsed=time.monotonic() - self._started,
                first_token_at=(
                    self._first_token - self._started if self._first_token is not None else None
                ),
                progress=None if done else self._progress,
                thought=self.thought.figures,
            )

    def cancel(self) -> None:
        """Ask the engine to stop; the thread ends when the engine says 'cancelled'."""
        self.cancelled = True
        try:
            self.engine.cancel()
        except Exception:  # noqa: BLE001 - a dead engine cannot be cancelled; the thread ends anyway
            pass

    def end_thinking(self) -> None:
        """Ask the engine to end the thought now; the answer follows on this stream."""
        self.thought_end_asked = True
        try:
            self.engine.end_thinking()
        except Exception:  # noqa: BLE001 - a dead engine: the stream ends by itself
            pass

    def wait(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait until the answer ended and the model's state is saved (the engine is free)."""
        return self.settled.wait(timeout)


class RenderPacer:
    """How often to update the screen: at most `max_rate` a second, fewer when it costs.

    Every `window` seconds it compares this process's CPU time (all its threads: rendering,
    the pipe from the engine) with the wall time. Above `budget` of one core the interval
    grows by half, below half the budget it shrinks, within [1/max_rate, 1/min_rate]. On a
    machine whose cores all decode, a 10 ms repaint 20 times a second would take a fifth of a
    core from the model; the pacer keeps the UI's share small there and full-rate elsewhere.
    """

    def __init__(self, max_rate: float = UPDATES_PER_SECOND,
                 min_rate: float = MIN_UPDATES_PER_SECOND, budget: float = RENDER_BUDGET,
                 window: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.process_time) -> None:
        self.shortest, self.longest = 1.0 / max_rate, 1.0 / min_rate
        self.budget, self.window = budget, window
        self.clock, self.cpu = clock, cpu
        self.interval = self.shortest
        self.share = 0.0
        self._t0, self._c0 = clock(), cpu()

    def restart(self) -> None:
        """A new answer: measure from now, at the interval reached so far."""
        self._t0, self._c0 = self.clock(), self.cpu()

    def sample(self) -> bool:
        """Call once per update; True when the interval changed."""
        now = self.clock()
        if now - self._t0 < self.window:
            return False
        cpu = self.cpu()
        self.share = (cpu - self._c0) / (now - self._t0)
        self._t0, self._c0 = now, cpu
        old = self.interval
        if self.share > self.budget:
            self.interval = min(self.longest, self.interval * 1.5)
        elif self.share < self.budget / 2:
            self.interval = max(self.shortest, self.interval / 1.5)
        return self.interval != old


class MemoryProbe:
    """Resident memory of the engine's worker process, or of this process and its children."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid

    def __call__(self) -> int | None:
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil is a dependency
            return None
        try:
            if self.pid:
                return psutil.Process(self.pid).memory_info().rss
            me = psutil.Process(os.getpid())
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    continue
            return total
        except psutil.Error:
            return None


def engine_pid(engine: object) -> int | None:
    """The worker process id, when the engine says it (`engine.pid`)."""
    pid = getattr(engine, "pid", None)
    if callable(pid):
        try:
            pid = pid()
        except Exception:  # noqa: BLE001
            return None
    return pid if isinstance(pid, int) and pid > 0 else None


def engine_alive(engine: object) -> bool | None:
    """Whether the engine's worker process still runs (None: no process to look at)."""
    pid = engine_pid(engine)
    if pid is None:
        return None
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return None
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return None


MemoryFn = Callable[[], "int | None"]
