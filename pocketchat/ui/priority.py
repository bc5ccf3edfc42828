"""Keep the chat's own threads out of the model's way: a lower CPU priority for the UI process.

On Linux a nice value belongs to each thread, and a new thread or process inherits its
creator's. The engine's worker is spawned from the launcher thread, which starts before
anything is lowered and is never lowered itself, so the worker keeps its normal priority while
every other thread of the UI (event loop, terminal writer and reader, the answer's reader, the
threads they start later) yields the CPU to it. Elsewhere the nice value is the process's and
a worker spawned later would inherit it, so nothing is lowered there.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Callable


class Launcher:
    """A daemon thread that starts a daemon thread for each callable given to it.

    The threads it starts inherit its priority, not that of the thread that submits.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self.thread = threading.Thread(target=self._loop, name="pocketchat-launcher", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            threading.Thread(target=self._run, args=(job,), name="pocketchat-engine-open",
                             daemon=True).start()

    def _run(self, job: Callable[[], object]) -> None:
        me = threading.get_native_id()
        with self._lock:
            self._running.add(me)
        try:
            job()
        finally:
            with self._lock:
                self._running.discard(me)

    def submit(self, job: Callable[[], object]) -> None:
        self._jobs.put(job)

    def thread_ids(self) -> set[int]:
        """Its own thread and those running a job now (kept at their priority)."""
        with self._lock:
            return {self.thread.native_id or 0, *self._running}


_launcher: Launcher | None = None
_launcher_lock = threading.Lock()


def launcher() -> Launcher:
    """The process's launcher (started on first use: before any thread is lowered)."""
    global _launcher
    with _launcher_lock:
        if _launcher is None:
            _launcher = Launcher()
        return _launcher


def lower_ui_priority(step: int) -> int:
    """Raise the nice value of every thread of this process but the launcher by `step`.

    Returns how many threads were lowered (0 where threads have no nice value of their own,
    or when `step` is 0).
    """
    if step <= 0 or not sys.platform.startswith("linux"):
        return 0
    keep = launcher().thread_ids()
    lowered = 0
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        if tid in keep:
            continue
        try:
            now = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(19, now + step))
            lowered += 1
        except OSError:  # a thread that just ended, or a limit: leave it
            continue
    return lowered
