"""Whether a worker process answers: its beats, its process state and its CPU time.

The child beats every BEAT_SECONDS from a thread of its own (`child.Beat`) while it loads or
has a request in flight, and sleeps otherwise, so an idle worker never wakes. llama.cpp runs
through ctypes, whose foreign calls release the GIL (llama_decode, the model's load), so the
beat goes on while a long prompt is read or a big model loads. The parent's reader thread
(`process.Reader`) notes every message it receives (`Watch.heard`) and samples the process a
few times a second while a request is outstanding; idle, it samples only when asked
(`Reader.verdict`). The rule (`Watch.judge`):

- the process is stopped (SIGSTOP, Ctrl+Z: the system's process state says "stopped"):
  not responding, at once, outstanding request or not;
- only while a request is outstanding (loading included): nothing heard for SILENCE seconds
  and under BUSY_SHARE of a core used meanwhile: not responding (stuck, or starved by
  swapping). A silent process that burns CPU is busy in a native call that holds the GIL (a
  backend that does not release it) and still responds. An idle worker's silence is its
  paused beat, never a verdict; a request that comes after it is given SILENCE seconds to be
  heard (`Watch.expect`);
- a process that resumes (stopped, then running again) gets SILENCE seconds to beat again.
"""

from __future__ import annotations

from collections import deque

from pocketchat.engines.types import Liveness

BEAT_SECONDS = 0.5  # the child's beat while busy, and how often the parent samples the
# process then (each wakes a process once: idle, neither runs)
SILENCE = 1.5  # seconds without a word before a process that uses no CPU is not responding
BUSY_SHARE = 0.05  # share of one core above which a silent process counts as busy


class Watch:
    """The liveness rule over the messages heard and the process samples (clock: the caller's)."""

    def __init__(self, now: float, *, silence: float = SILENCE,
                 busy_share: float = BUSY_SHARE) -> None:
        self.silence, self.busy_share = silence, busy_share
        self.last_heard = now
        self.verdict = Liveness()
        self._samples: deque[tuple[float, float]] = deque()  # (time, CPU seconds)
        self._stopped = False

    def heard(self, now: float) -> None:
        """A message (a beat or any other) arrived from the process at `now`."""
        self.last_heard = max(self.last_heard, now)

    def expect(self, now: float) -> None:
        """A request is outstanding from `now`, after none was: the process has `silence`
        seconds from now to be heard (its beat was paused while it was idle)."""
        self.last_heard = max(self.last_heard, now)

    def judge(self, now: float, *, stopped: bool, cpu_seconds: float | None,
              expecting: bool = True) -> Liveness:
        """The verdict at `now`, given the process state and its CPU seconds so far;
        `expecting`: a request is outstanding (else silence says nothing)."""
        if self._stopped and not stopped:  # resumed: it has SILENCE seconds to beat again
            self.last_heard = max(self.last_heard, now)
        self._stopped = stopped
        if cpu_seconds is not None:
            self._samples.append((now, cpu_seconds))
            while len(self._samples) > 2 and self._samples[1][0] <= now - self.silence:
                self._samples.popleft()  # keep one sample at or before the window's start
        silent = max(0.0, now - self.last_heard)
        if stopped:
            verdict = Liveness(False, silent, "stopped")
        elif not expecting or silent < self.silence or self._busy():
            verdict = Liveness(True, silent)
        else:
            verdict = Liveness(False, silent, "silent")
        self.verdict = verdict
        return verdict

    def _busy(self) -> bool:
        """At least `busy_share` of a core used over the last `silence` seconds (as sampled)."""
        if len(self._samples) < 2:
            return False
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return t1 > t0 and (c1 - c0) / (t1 - t0) >= self.busy_share


class ProcessProbe:
    """(stopped, CPU seconds) of the process `pid`, from the system (psutil); (False, None)
    when it cannot be read (ended, or not permitted)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._proc = None

    def __call__(self) -> tuple[bool, float | None]:
        try:
            import psutil

            if self._proc is None:
                self._proc = psutil.Process(self.pid)
            with self._proc.oneshot():
                status = self._proc.status()
                times = self._proc.cpu_times()
        except Exception:  # noqa: BLE001 - psutil.Error, a missing pid: nothing to say
            return False, None
        stopped = status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
        return stopped, times.user + times.system
