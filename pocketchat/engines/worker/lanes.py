"""Who takes the worker's next request (`child._serve`): its lanes, in arrival order.

Without a front every lane takes requests as they come. With one (the batcher's step thread,
`batcher.Batcher.serve`), the front takes a request whenever it is free, and the other lanes
only while it answers: a lone conversation is then always answered in the thread that decodes,
and a second one that comes while it answers is taken at once by a lane and decoded in the same
steps. While the front settles an answer it has delivered (a few tokens), a request waits for
it rather than going to a lane: it is the conversation's own next turn, most often.
"""

from __future__ import annotations

import threading
import traceback
from collections import deque
from typing import Any, Callable

ANSWERS = ("chat", "complete")  # the requests that stream an answer


class Requests:
    """The queue of requests and the rule above; `wake` is called when one arrives (the front
    waits in the batcher, not here)."""

    def __init__(self, front: bool = False, wake: Callable[[], None] | None = None) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[tuple] = deque()
        self._front = front
        self._answering = False  # the front runs a request and has not delivered it yet
        self._closed = False
        self._wake = wake

    def put(self, msg: tuple) -> None:
        with self._cond:
            self._queue.append(msg)
            self._cond.notify()
        if self._wake is not None:
            self._wake()

    def close(self) -> None:
        """Every lane's `take` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._wake is not None:
            self._wake()

    def take(self) -> tuple | None:
        """The next request for a lane (waits for one, and with a front, for it to be
        answering); None once closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or (
                bool(self._queue) and (self._answering or not self._front)))
            return None if self._closed else self._queue.popleft()

    def take_front(self) -> tuple | None:
        """The next request for the front, or None now (it never waits)."""
        with self._cond:
            if self._closed or not self._queue:
                return None
            msg = self._queue.popleft()
            # An answer: the lanes may take what comes next. A state call or status is over at
            # once (the server asks for status after each answer): what comes next is left to it.
            self._answering = msg[0] in ANSWERS
            self._cond.notify_all()
            return msg

    def delivered(self) -> None:
        """The front's request is answered (it may still settle): the lanes leave what comes
        next to it."""
        with self._cond:
            self._answering = False


def front_jobs(requests: Requests, handle: Callable[[tuple], Any]
               ) -> Callable[[], Callable[[], None] | None]:
    """The batcher's `take` for the front: the next request as a job that `handle`s it."""
    def take() -> Callable[[], None] | None:
        msg = requests.take_front()
        if msg is None:
            return None

        def job() -> None:
            try:
                handle(msg)
            except Exception:  # noqa: BLE001 - the step thread goes on; the log has it
                traceback.print_exc()
            finally:
                requests.delivered()
        return job
    return take
