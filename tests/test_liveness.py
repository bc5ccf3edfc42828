"""The liveness rule (`engines.liveness.Watch`) on a scripted clock: when a worker process counts
as not responding, and when it must not (busy in a long native call, idle, just resumed)."""

from __future__ import annotations

from pocketchat.engines.worker.liveness import BEAT_SECONDS, SILENCE, Watch
from pocketchat.engines.types import NOT_RESPONDING, Liveness, liveness_of


class Process:
    """A scripted worker process: its clock, CPU seconds and state, sampled as the reader does."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 5.0
        self.stopped = False
        self.watch = Watch(self.now)

    def run(self, seconds: float, *, beats: bool, cpu_share: float = 0.0) -> list[Liveness]:
        """`seconds` of life sampled every BEAT_SECONDS: the verdicts, in order."""
        verdicts = []
        for _ in range(round(seconds / BEAT_SECONDS)):
            self.now += BEAT_SECONDS
            self.cpu += cpu_share * BEAT_SECONDS
            if beats and not self.stopped:
                self.watch.heard(self.now)
            verdicts.append(self.watch.judge(self.now, stopped=self.stopped,
                                             cpu_seconds=self.cpu))
        return verdicts

    def first_silent(self, verdicts: list[Liveness]) -> float | None:
        """Seconds into `verdicts` of the first 'not responding'."""
        for i, v in enumerate(verdicts):
            if not v.responding:
                return (i + 1) * BEAT_SECONDS
        return None


def test_a_process_that_beats_responds_idle_or_busy():
    p = Process()
    assert all(v.responding for v in p.run(60, beats=True))  # idle: no CPU, beats
    assert all(v.responding for v in p.run(60, beats=True, cpu_share=1.0))  # decoding


def test_a_stopped_process_is_not_responding_at_the_first_sample():
    p = Process()
    p.run(5, beats=True, cpu_share=1.0)
    p.stopped = True  # SIGSTOP mid-answer
    verdicts = p.run(3, beats=True)
    assert p.first_silent(verdicts) == BEAT_SECONDS
    assert all(not v.responding and v.reason == "stopped" for v in verdicts)
    assert verdicts[-1].message.startswith(NOT_RESPONDING)
    assert "stopped by a signal" in verdicts[-1].message


def test_a_silent_process_that_uses_no_cpu_is_not_responding_within_two_seconds():
    p = Process()
    p.run(5, beats=True, cpu_share=1.0)
    verdicts = p.run(10, beats=False)  # stuck: no beat, no CPU (a deadlock, a swap storm)
    found = p.first_silent(verdicts)
    assert found is not None and SILENCE <= found <= 2.0, found
    assert all(not v.responding for v in verdicts[int(found / BEAT_SECONDS):])
    last = verdicts[-1]
    assert last.reason == "silent" and last.silent_seconds >= 9.5
    assert NOT_RESPONDING in last.message and "10 s" in last.message


def test_a_silent_process_that_burns_cpu_is_busy_not_stuck():
    """A long native call that holds the GIL (a backend that does not release it) stops the
    beats but uses the CPU: never reported, however long it takes."""
    p = Process()
    p.run(2, beats=True, cpu_share=1.0)
    assert all(v.responding for v in p.run(120, beats=False, cpu_share=0.9))
    verdicts = p.run(5, beats=False, cpu_share=0.0)  # then it stops using the CPU too
    found = p.first_silent(verdicts)
    assert found is not None and found <= 2.0, found


def test_a_trickle_of_cpu_is_not_taken_for_work():
    p = Process()
    p.run(2, beats=True)
    found = p.first_silent(p.run(5, beats=False, cpu_share=0.01))  # page faults of a swap storm
    assert found is not None and found <= 2.0, found


def test_a_resumed_process_responds_at_once_and_is_watched_again():
    p = Process()
    p.run(2, beats=True)
    p.stopped = True
    assert not any(v.responding for v in p.run(30, beats=False))
    p.stopped = False  # SIGCONT: it has SILENCE seconds to beat again
    assert p.run(BEAT_SECONDS, beats=False)[-1].responding
    assert all(v.responding for v in p.run(10, beats=True))
    p.stopped = True
    p.run(BEAT_SECONDS, beats=False)
    p.stopped = False  # stopped and resumed, and then it never beats: stuck after all
    found = p.first_silent(p.run(5, beats=False))
    assert found is not None and found <= 2.0, found


def test_a_beat_after_silence_means_responding_again():
    p = Process()
    assert not p.run(3, beats=False)[-1].responding
    assert p.run(BEAT_SECONDS, beats=True)[-1] == Liveness(True, 0.0)


def test_engines_without_a_process_always_respond():
    class InProcess:
        pass

    class Broken:
        def liveness(self):
            raise RuntimeError("closed")

    assert liveness_of(InProcess()) == Liveness()
    assert liveness_of(Broken()).responding
    assert Liveness().message == ""


def test_a_worker_killed_after_it_stopped_responding_is_not_blamed_on_memory():
    import signal

    from pocketchat.engines.worker.process import describe_exit

    assert "out-of-memory" in describe_exit(-signal.SIGKILL)  # killed while it answered
    stuck = describe_exit(-signal.SIGKILL, stuck=True)
    assert "SIGKILL" in stuck and "stopped responding" in stuck and "memory" not in stuck
