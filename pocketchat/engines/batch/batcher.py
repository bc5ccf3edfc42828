"""Several conversations decoded together: continuous batching over one context (`serve --parallel`).

`Batcher`: the steps. Each sequence engine hands it its pending tokens (`Work`): one token
  for a sequence that is decoding, its prompt for a newcomer. A step gathers every pending
  sequence's tokens into one `llama_batch`: the decoding sequences' tokens first, then chunks
  of the prompts (at most `chunk` prompt tokens a step while others decode, so a long prompt
  never stalls them; the whole `n_batch` when it is alone). One step thread runs every step
  (so every `llama_decode` of the context comes from one OS thread: llama.cpp's CPU backend
  keeps an OpenMP thread pool per calling thread, and pools of several callers spin against
  each other; measured on the starter, once a second thread of a process has decoded, every
  decode runs at about 0.35 of the speed, 30 against 86 tok/s). A step is due when every member has
  submitted, or when the oldest submission has waited `wait` seconds for a straggler since
  the last step ended. The step thread samples each finished sequence's next token inside
  the step (`Work.sample(batch_index)`), so the logits are read before the next step
  overwrites them, and a sequence may fall behind without blocking anyone. A
  cancelled sequence leaves at the next step (its decoded part stays, as `done` says).
  `lock` is the context's: a step holds it, and so do the sequences' state operations.
The step thread may also answer (`serve(take)`: the worker's first lane is the step thread):
  then an answer it runs decodes inline, leading each step itself with the other sequences'
  pending work in it, so one conversation alone never hands a token between threads (the
  hand-over cost about 0.2 ms a token on the starter). While it answers, its own straggling
  holds a step back as any member's does, up to `wait`; while it waits for something else,
  `idle(ready)` keeps leading the others' steps.
The `Engine` over the sequences is `sequences.Sequences`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from pocketchat.errors import EngineClosed, EngineError

CHUNK_TOKENS = 64  # prompt tokens a step carries while other sequences decode
WAIT_SECONDS = 0.02  # how long a step waits for a member that has not submitted yet


class StepCancelled(Exception):
    """The work left the batch because its sequence was cancelled (`Work.done` tokens stay)."""


class StepAborted(StepCancelled):
    """A cancel interrupted a step inside the runtime: what that step left is unknown (the
    first `Work.done` tokens stay; the rest must be cut back)."""


@dataclass(eq=False)
class Work:
    """Tokens of one sequence to decode from position `pos`; `sample(index)`, when given, is
    called by the leader with the batch index of the last token's logits, and its value
    returned to the submitter."""

    seq: int
    tokens: Sequence[int]
    pos: int
    sample: Callable[[int], Any] | None = None
    cancel: threading.Event | None = None
    logits: int = 1  # trailing tokens whose logits `sample` reads (a verified draft: k + 1)
    done: int = 0
    result: Any = None
    error: BaseException | None = None
    finished: bool = False
    in_step: bool = False
    since: float = field(default_factory=time.monotonic)


# One step's part of a work: (work, first token index in work.tokens, count).
Part = tuple[Work, int, int]


class Batcher:
    """Gathers the sequences' pending tokens into steps; see the module docstring.

    `run_step(parts)` decodes the parts as one batch (the logits of a part that ends its work
    and has `sample` are wanted) and returns the runtime's code (0: done, 2: aborted by a
    cancel); it is called with `lock` held.

    With `solo` (a context of one sequence) there is no step thread: `decode` runs the steps
    in the caller's thread, the prompt `n_batch` tokens a step, the same parts and sampling
    as a batch of width one (the caller is the one thread that decodes: the chat's worker
    answers in one thread).
    """

    def __init__(self, run_step: Callable[[list[Part]], int], n_batch: int, *,
                 chunk: int = CHUNK_TOKENS, wait: float = WAIT_SECONDS,
                 solo: bool = False) -> None:
        self.solo = solo
        self.lock = threading.RLock()
        self._run_step = run_step
        self.n_batch = max(1, n_batch)
        self.chunk = max(1, min(chunk, self.n_batch))
        self.wait = wait
        self._cond = threading.Condition(threading.Lock())
        self._members: dict[int, int] = {}  # seq -> nesting depth
        self._pending: dict[int, Work] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        self._take: Callable[[], Callable[[], None] | None] | None = None  # `serve`'s jobs
        self._ended = 0.0  # when the last step ended (monotonic)
        self.steps = 0  # steps run, for tests and figures
        self.max_width = 0  # the most sequences one step carried

    @contextmanager
    def member(self, seq: int) -> Iterator[None]:
        """While inside, steps wait (up to `wait`) for `seq`'s next submission."""
        with self._cond:
            self._members[seq] = self._members.get(seq, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                depth = self._members.pop(seq, 1) - 1
                if depth > 0:
                    self._members[seq] = depth
                self._cond.notify_all()

    def decode(self, work: Work) -> Any:
        """Decode `work` (in one or several steps); its `sample` result. Raises StepCancelled
        when its cancel event is set between steps (call `wake()` after setting it), or the
        step's error."""
        if work.cancel is not None and work.cancel.is_set():
            raise StepCancelled
        if self.solo:
            return self._decode_solo(work)
        if self.leading:
            return self._decode_leading(work)
        with self.member(work.seq), self._cond:
            if self._closed:
                raise EngineClosed()
            self._start()
            self._pending[work.seq] = work
            self._cond.notify_all()
            try:
                while not work.finished:
                    if work.cancel is not None and work.cancel.is_set() and not work.in_step:
                        raise StepCancelled
                    self._cond.wait()
            finally:
                if self._pending.get(work.seq) is work:
                    del self._pending[work.seq]
                    self._cond.notify_all()
            if work.error is not None:
                raise work.error
            return work.result

    def _decode_solo(self, work: Work) -> Any:
        """`decode` for a context of one sequence: its steps in this thread."""
        if self._closed:
            raise EngineClosed()
        with self.lock:
            while True:
                n = min(self.n_batch, len(work.tokens) - work.done)
                part = [(work, work.done, n)]
                rc = self._run_step(part)
                self.steps += 1
                if rc == 2:
                    raise StepAborted
                if rc != 0:
                    raise EngineError(f"llama_decode returned {rc}")
                work.done += n
                if work.done >= len(work.tokens):
                    break
                if work.cancel is not None and work.cancel.is_set():
                    raise StepCancelled
            self.max_width = 1
            return work.sample(n - 1) if work.sample is not None else None

    def _decode_leading(self, work: Work) -> Any:
        """`decode` in the step thread: it leads the steps until `work` is done."""
        with self.member(work.seq), self._cond:
            self._pending[work.seq] = work
            try:
                while not work.finished:
                    if self._closed:
                        raise EngineClosed()
                    if work.cancel is not None and work.cancel.is_set():
                        raise StepCancelled
                    left = self._left()
                    if left <= 0 and self._lead():
                        continue
                    self._cond.wait(left if left > 0 else self.wait)
            finally:
                if self._pending.get(work.seq) is work:
                    del self._pending[work.seq]
            if work.error is not None:
                raise work.error
            return work.result

    @property
    def leading(self) -> bool:
        """The calling thread is the step thread."""
        return self._thread is not None and self._thread is threading.current_thread()

    def serve(self, take: Callable[[], Callable[[], None] | None]) -> None:
        """Start the step thread now; whenever no step is due, it runs the job `take()`
        returns, if any (a job that never raises; call `wake()` when one may be ready)."""
        with self._cond:
            self._take = take
            self._start()

    def idle(self, ready: Callable[[], bool], timeout: float, poll: float = 0.005) -> bool:
        """Wait up to `timeout` seconds for `ready()` (polled), leading the steps that fall
        due meanwhile when called in the step thread; whether it became ready."""
        end = time.monotonic() + timeout
        with self._cond:
            while not ready():
                remaining = end - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                if self.leading:
                    left = self._left()
                    if self._pending and left <= 0 and self._lead():
                        continue
                self._cond.wait(min(poll, remaining))
            return True

    def wake(self) -> None:
        """Have every submitter look at its cancel event now."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the step thread (after the step it runs)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="pocketchat-steps",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        """The step thread: runs each step when it is due, until closed."""
        with self._cond:
            while not self._closed:
                left = self._left()
                if left <= 0 and self._lead():
                    continue
                job = self._take() if self._take is not None else None
                if job is not None:
                    self._cond.release()
                    try:
                        job()
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait(left if self._pending and left > 0 else None)

    def _left(self) -> float:
        """Seconds until the next step is due: 0 when every member has submitted; else the
        oldest submission's wait for a straggler, counted from the last step's end (a member
        that was in it is coming back, not straggling)."""
        if not self._pending:
            return self.wait
        if all(seq in self._pending for seq in self._members):
            return 0.0
        oldest = max(min(w.since for w in self._pending.values()), self._ended)
        return self.wait - (time.monotonic() - oldest)

    def _compose(self) -> list[Part]:
        """This step's parts: one token of each decoding sequence, then prompt chunks."""
        room = self.n_batch
        works = sorted(self._pending.values(), key=lambda w: (len(w.tokens) - w.done, w.seq))
        parts: list[Part] = []
        prompts = []
        for w in works:
            if w.cancel is not None and w.cancel.is_set():
                continue
            left = len(w.tokens) - w.done
            if left == 1 or (w.logits > 1 and left <= w.logits):  # a token, or a draft whole
                if room >= left:
                    parts.append((w, w.done, left))
                    room -= left
            else:
                prompts.append(w)
        if prompts:
            alone = not parts and len(prompts) == 1
            budget = room if alone else min(room, max(self.chunk, len(prompts)))
            share = max(1, budget // len(prompts))
            for w in prompts:
                n = min(len(w.tokens) - w.done, share, room)
                if n > 0:
                    parts.append((w, w.done, n))
                    room -= n
        return parts

    def _lead(self) -> bool:
        """Run one step (called with `_cond` held; released while decoding); False when
        there was nothing to run."""
        parts = self._compose()
        if not parts:  # every pending work is cancelled: its submitter leaves when woken
            self._cond.notify_all()
            return False
        for w, _, _ in parts:
            w.in_step = True
        self._cond.release()
        try:
            with self.lock:
                try:
                    rc = self._run_step(parts)
                except BaseException as exc:  # noqa: BLE001 - handed to every submitter
                    rc, error = -1, exc
                else:
                    error = None if rc == 0 else EngineError(f"llama_decode returned {rc}")
                for w, start, n in parts:
                    if error is not None:
                        w.error, w.finished = error, True
                        continue
                    w.done = start + n
                    if w.done < len(w.tokens):
                        continue
                    if w.sample is not None:
                        try:
                            w.result = w.sample(self._index(parts, w))
                        except BaseException as exc:  # noqa: BLE001 - raised in its own thread
                            w.error = exc
                    w.finished = True
        finally:
            self._cond.acquire()
            self._ended = time.monotonic()
            self.steps += 1
            self.max_width = max(self.max_width, len(parts))
            for w, _, _ in parts:
                w.since, w.in_step = time.monotonic(), False
                if w.finished and self._pending.get(w.seq) is w:
                    del self._pending[w.seq]  # not pending now: its submitter is coming back
            self._cond.notify_all()
        return True

    @staticmethod
    def _index(parts: list[Part], work: Work) -> int:
        """The batch index of `work`'s last token in this step."""
        at = 0
        for w, _, n in parts:
            at += n
            if w is work:
                return at - 1
        raise AssertionError("work not in step")
