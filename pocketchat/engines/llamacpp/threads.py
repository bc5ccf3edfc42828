"""CPU threads that follow a busy machine, step by step (`ThreadPolicy`, one per kind of step).

llama.cpp's CPU backend splits each operation of a step over its threads and waits for all of
them at a barrier: when another program takes a core, one thread is descheduled, the others
spin, and a step takes 3-10x as long. Fewer threads is the fix in reach, and the best count
differs by machine and model, so the policy measures. It is fed each step's time (and, when
known, how many cores other processes used lately) and says the count the next step should use:

- it keeps the recent time per token at each count (a low quantile of its last steps: what
  that count does when nothing competes) and notices a slow streak at the current count (two
  steps at twice that, or one at four times) while other processes want the cores: then it
  tries one thread fewer (and then one fewer again, while that is faster);
- when the `others` figure turns crowded (other processes want one of the cores its threads
  use), it moves one thread fewer before the next step rather than after a collapsed one;
- a trial of a lower count is compared with the steps before it, and undone when it is no
  faster (the slow steps had another cause);
- below the full count it probes one thread more: when other processes leave a core free
  (the `others` figure) or, without that figure, from time to time; a probe that is no
  faster ends after one or two steps, and the next waits twice as long (up to a bound);
- it never goes below 1 or above the full count; pinned (`--threads N`), it never moves.

The policy is pure (no threads, no I/O; `clock` is injectable); `CpuLoad` measures `others`
for it, `ThreadControl` holds the two policies of an engine (decode, prompt batches) and
applies their counts. Each move says why (`ThreadMove.why`), for the status bar and `bench`.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Literal

Kind = Literal["decode", "batch"]

SLOW = 2.0  # a step this many times the count's quiet time is slow ...
SLOW_STREAK = 2  # ... and this many in a row move the count down
VERY_SLOW = 4.0  # one step this slow is enough
TRIAL_STEPS = 3  # steps a lower count runs before it is compared with the one above
PROBE_STEPS = 2  # steps a probe of one thread more runs (it ends after one when much slower)
FASTER = 1.05  # a count must be this much faster than the other to be kept
HISTORY = 32  # steps kept per count
QUIET_QUANTILE = 0.25  # the quiet time of a count: this quantile of its recent steps
ROOM = 0.5  # a core counts as free for one more thread when others leave this much of it
CONTENDED = 0.2  # others want our cores when they leave less than n - this much of the machine
PROBE_WAIT = 1.0  # seconds before the first probe after a move down (doubles after a failed one)
PROBE_WAIT_MAX = 8.0  # ... up to this (so a machine free again is found within ~10 s)
BLIND_WAIT_MAX = 16.0  # without the `others` figure probes are blind: at most this apart
NOTE_SECONDS = 10.0  # a move back to the full count stays in the note this long
BUSY = "the machine is busy"
UNDONE = "fewer threads were no faster"
BATCH_MIN = 32  # prompt batches shorter than this are not measured


@dataclass(frozen=True)
class ThreadMove:
    """One change of the count: when (the policy's clock), from, to, and why."""

    at: float
    kind: Kind
    old: int
    new: int
    why: str

    def describe(self, full: int) -> str:
        """'1 of 2 threads: the machine is busy'."""
        return f"{self.new} of {full} threads: {self.why}"


class ThreadPolicy:
    """The thread count of one kind of step; see the module docstring.

    Decode steps are compared by their width (the sequences decoded together: one in the
    chat), prompt batches per token."""

    def __init__(self, full: int, *, kind: Kind = "decode", pinned: bool = False,
                 blind: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.full = max(1, int(full))
        self.kind: Kind = kind
        self.pinned = pinned
        self.blind = blind  # no `others` figure will come: probe on a timer instead
        self.clock = clock
        self.current = self.full
        self.moves: list[ThreadMove] = []
        self._times: dict[tuple[int, int], Deque[float]] = {}  # (count, width) -> last steps
        self._width = 0  # the width of the last step
        self._slow = 0  # slow steps in a row at the current count
        self._mode: Literal["steady", "trial", "probe"] = "steady"
        self._from = self.full  # the count a trial or a probe left
        self._steps = 0  # steps of the running trial or probe
        self._wait = PROBE_WAIT
        self._next_probe = 0.0
        self._roomy = False  # others left room at the last step (a probe may start at once)
        self._crowded = False  # others wanted one of our cores at the last step
        self._blind_trial = False  # the running trial began on the load figure alone

    # -- what it knows ----------------------------------------------------------------------

    def quiet(self, count: int, width: int | None = None) -> float | None:
        """The time of a step at `count` threads when nothing competes (a low quantile of its
        recent steps; seconds per token for prompt batches); None: not measured."""
        times = self._times.get((count, self._width if width is None else width))
        if not times:
            return None
        ordered = sorted(times)
        return ordered[int(QUIET_QUANTILE * (len(ordered) - 1))]

    def recent(self, count: int, n: int) -> float | None:
        """The median of the last `n` steps at `count` (of the last step's width)."""
        times = self._times.get((count, self._width))
        if not times:
            return None
        last = sorted(list(times)[-n:])
        return last[len(last) // 2]

    @property
    def moved(self) -> ThreadMove | None:
        return self.moves[-1] if self.moves else None

    def note(self) -> str:
        """What the user should know: '' at the full count when nothing moved lately."""
        last = self.moved
        if last is None:
            return ""
        if self.settled == self.full and (self.clock() - last.at > NOTE_SECONDS
                                          or last.why == UNDONE):
            return ""
        why = next((m.why for m in reversed(self.moves) if m.why != UNDONE), last.why)
        return f"{self.settled} of {self.full} threads: {why}"

    @property
    def settled(self) -> int:
        """The count it runs on (not a probe's)."""
        return self._from if self._mode == "probe" else self.current

    # -- the step loop asks -----------------------------------------------------------------

    def observe(self, seconds: float, tokens: int = 1, others: float | None = None,
                cores: int | None = None) -> int:
        """A step of `tokens` tokens took `seconds` at the current count; `others`: cores
        other processes used lately, of `cores` (None: not known; unless the policy is `blind`,
        not yet: no probe). The count for the next step."""
        if self.pinned or seconds <= 0 or tokens <= 0:
            return self.current
        if self.kind == "decode":
            self._width, t = tokens, seconds
        else:
            self._width, t = 0, seconds / tokens
        n = self.current
        quiet = self.quiet(n)  # before this step joins it
        self._times.setdefault((n, self._width), deque(maxlen=HISTORY)).append(t)
        room = None if others is None or cores is None else cores - others
        if self._mode == "probe":
            return self._probing(t)
        if self._mode == "trial":
            return self._trying()
        # Fewer threads help only when other processes want the cores: on a machine known to be
        # idle a slow step has another cause (pages read in, a busy memory bus).
        contended = room is None or room < n - CONTENDED
        slow = quiet is not None and t >= SLOW * quiet and contended
        self._slow = self._slow + 1 if slow else min(self._slow, 0)
        # Others came to want a core (the reading turned crowded): one thread fewer before
        # a collapsed step is paid for (one can cost seconds at POCKET's size); kept until
        # others leave room again, as no step at n under this load is there to compare with.
        crowded = room is not None and n > 1 and n > room + ROOM
        came = crowded and not self._crowded
        self._crowded = crowded
        if came and self._mode == "steady":
            self._mode, self._from, self._steps, self._slow = "trial", n, 0, 0
            self._blind_trial = True  # nothing to compare with: kept (one fewer is tried next)
            self._move(n, n - 1, BUSY)
            return self.current
        if n > 1 and ((quiet is not None and t >= VERY_SLOW * quiet and contended)
                      or self._slow >= SLOW_STREAK):
            self._mode, self._from, self._steps, self._slow = "trial", n, 0, 0
            self._move(n, n - 1, BUSY)
            return self.current
        if n < self.full:
            roomy = room is not None and room >= n + ROOM
            now = self.clock()
            if roomy and not self._roomy:
                self._next_probe = min(self._next_probe, now)  # room came: look now
            self._roomy = roomy
            if now >= self._next_probe and (roomy or (room is None and self.blind)):
                self._mode, self._from, self._steps = "probe", n, 0
                self.current = n + 1  # a probe is not a move until it is kept
        return self.current

    def _trying(self) -> int:
        """A lower count's trial: kept unless slower than the steps above it, else undone."""
        self._steps += 1
        if self._steps < TRIAL_STEPS:
            return self.current
        self._mode = "steady"
        here, above = self.recent(self.current, TRIAL_STEPS), self.recent(self._from, SLOW_STREAK)
        blind, self._blind_trial = self._blind_trial, False
        if not blind and here is not None and above is not None and here > above * FASTER:
            self._move(self.current, self._from, UNDONE)
            self._slow = -2 * SLOW_STREAK  # a few steps before the next slow streak counts
            return self.current
        if self.current > 1:  # faster: one fewer may be faster still
            self._mode, self._from, self._steps = "trial", self.current, 0
            self._move(self.current, self.current - 1, self.moved.why if self.moved else BUSY)
            return self.current
        self._wait = PROBE_WAIT
        self._next_probe = self.clock() + self._wait
        return self.current

    def _probing(self, t: float) -> int:
        """One thread more: kept when faster than the count below, else back down."""
        self._steps += 1
        below = self.recent(self._from, TRIAL_STEPS)
        much_slower = below is not None and t > 2 * below
        if self._steps < PROBE_STEPS and not much_slower:
            return self.current
        self._mode = "steady"
        here = self.recent(self.current, self._steps)
        if not much_slower and here is not None and (below is None or here * FASTER <= below):
            self._wait = PROBE_WAIT
            self._move(self._from, self.current, "the machine is free again"
                       if self.current == self.full else "more threads are faster again")
            self._next_probe = self.clock() + self._wait
            return self.current
        self.current = self._from
        self._wait = min(self._wait * 2, PROBE_WAIT_MAX if self._roomy else BLIND_WAIT_MAX)
        self._next_probe = self.clock() + self._wait
        return self.current

    def _move(self, old: int, new: int, why: str) -> None:
        new = max(1, min(self.full, new))
        self.moves.append(ThreadMove(self.clock(), self.kind, old, new, why))
        self.current = new


class CpuLoad:
    """How many cores other processes used since the last reading at least `every` seconds
    ago (the machine's busy time less this process's own); None where it cannot be read."""

    def __init__(self, every: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.clock = every, clock
        try:  # the CPUs this process may run on (a container's cpuset), else all of them
            self.cores = len(os.sched_getaffinity(0)) or 1
        except (AttributeError, OSError):
            self.cores = os.cpu_count() or 1
        self._last: tuple[float, float, float] | None = None
        self.others: float | None = None
        try:
            import psutil

            self._machine = psutil.cpu_times
            self._process = psutil.Process()
        except Exception:  # noqa: BLE001 - no psutil, or no access: the policy probes blind
            self._machine = None
        self.read()

    @property
    def available(self) -> bool:
        """Whether this machine's figures can be read at all."""
        return self._machine is not None

    def read(self) -> float | None:
        """The latest figure (read anew when `every` has passed)."""
        if self._machine is None:
            return None
        now = self.clock()
        if self._last is not None and now - self._last[0] < self.every:
            return self.others
        try:
            m = self._machine()
            busy = sum(m) - m.idle - getattr(m, "iowait", 0.0)
            own = sum(self._process.cpu_times()[:2])
        except Exception:  # noqa: BLE001
            self._machine = None
            return None
        if self._last is not None:
            wall = now - self._last[0]
            self.others = max(0.0, ((busy - self._last[1]) - (own - self._last[2])) / wall)
        self._last = (now, busy, own)
        return self.others


class ThreadControl:
    """An engine's two policies (decode steps, prompt batches) and the load reading they share;
    `apply(n_threads, n_threads_batch)` sets the counts in the runtime (llama_set_n_threads).

    llama.cpp runs a step of one token on its decode threads and any larger step on its batch
    threads, so a step of several decoding sequences (`serve --parallel`) is given the decode
    count for both. Prompt batches shorter than `BATCH_MIN` tokens are not measured (their
    time per token is not comparable)."""

    def __init__(self, decode: int, batch: int, apply: Callable[[int, int], None], *,
                 pinned: bool = False, load: CpuLoad | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.load = load if load is not None or pinned else CpuLoad()
        blind = self.load is None or not self.load.available
        self.decode = ThreadPolicy(decode, kind="decode", pinned=pinned, blind=blind, clock=clock)
        self.batch = ThreadPolicy(batch, kind="batch", pinned=pinned, blind=blind, clock=clock)
        self.pinned = pinned
        self._apply = apply
        self._set = (self.decode.current, self.batch.current)

    def before(self, decoding: bool) -> None:
        """Set the counts for the next step (`decoding`: every token of it is a sequence's
        next token; else it reads a prompt)."""
        d = self.decode.current
        want = (d, d if decoding else self.batch.current)
        if want != self._set:
            self._set = want
            self._apply(*want)

    def after(self, decoding: bool, tokens: int, seconds: float) -> None:
        """The step `before` set up took `seconds` for `tokens` tokens: its policy is told."""
        if self.pinned or (not decoding and tokens < BATCH_MIN):
            return
        load = self.load
        others = load.read() if load is not None else None
        cores = load.cores if load is not None else None
        (self.decode if decoding else self.batch).observe(seconds, tokens, others, cores)

    @property
    def threads(self) -> int:
        """The decode count now."""
        return self.decode.current

    def note(self) -> str:
        """The decode count's note (what the status bar shows), else the batch count's."""
        return self.decode.note() or self.batch.note()
