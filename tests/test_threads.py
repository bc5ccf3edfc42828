"""The thread policy (engines/llamacpp/threads.py) against a scripted machine: step times per thread
count, quiet or beside busy programs, on a scripted clock (no real time, no model)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pocketchat.engines.answer.rate import RecentRate
from pocketchat.engines.llamacpp.threads import ThreadControl, ThreadPolicy

# Seconds per decode step of the full-size synthetic POCKET Q2_K on a 2-core machine without
# AMX (issue #34's figures): 2 threads 11 tok/s quiet, 0.63 beside one busy program; 1 thread
# 8 tok/s quiet, 7.5 beside it.
QUIET = {2: 1 / 11, 1: 1 / 8}
BUSY = {2: 1 / 0.63, 1: 1 / 7.5}


@dataclass
class Machine:
    """A scripted machine: `busy` other programs between clock times, a step's time per count."""

    cores: int = 2
    busy_from: float = float("inf")
    busy_until: float = float("inf")
    times: dict = field(default_factory=lambda: {False: QUIET, True: BUSY})
    now: float = 0.0

    def busy(self) -> bool:
        return self.busy_from <= self.now < self.busy_until

    def others(self, threads: int) -> float:
        """Cores other programs got lately (one busy loop shares the cores with our threads)."""
        if not self.busy():
            return 0.0
        return self.cores / (threads + 1) if threads + 1 > self.cores else 1.0

    def clock(self) -> float:
        return self.now


def run(policy: ThreadPolicy, machine: Machine, seconds: float, *, blind: bool = False
        ) -> list[tuple[float, int, float]]:
    """Decode on the machine for `seconds` of its clock: (time, threads, step seconds) per step."""
    steps = []
    end = machine.now + seconds
    while machine.now < end:
        n = policy.current
        t = machine.times[machine.busy()][n]
        machine.now += t
        steps.append((machine.now, n, t))
        policy.observe(t, 1, None if blind else machine.others(n), None if blind else machine.cores)
    return steps


def tok_s(steps, start: float = 0.0, end: float = float("inf")) -> float:
    inside = [s for s in steps if start < s[0] <= end]
    return len(inside) / (inside[-1][0] - start) if inside else 0.0


def policy_on(machine: Machine, full: int = 2, **kw) -> ThreadPolicy:
    return ThreadPolicy(full, clock=machine.clock, **kw)


def test_a_slow_streak_moves_the_count_down_and_says_why():
    m = Machine(busy_from=5.0)
    p = policy_on(m)
    quiet = run(p, m, 4.9)
    assert {n for _, n, _ in quiet} == {2}  # nothing competes: the full count throughout
    assert p.note() == ""
    busy = run(p, m, 20.0, blind=True)  # no load figure: the step times alone tell
    first_down = next(i for i, s in enumerate(busy) if s[1] == 1)
    slow_steps = [s for s in busy[:first_down] if s[2] > 1.0]
    assert len(slow_steps) <= 2  # at most two steps at the collapsed count before it moves
    assert p.current == 1
    assert p.note() == "1 of 2 threads: the machine is busy"
    assert p.moved is not None and (p.moved.old, p.moved.new) == (2, 1)


def test_beside_a_busy_program_it_keeps_most_of_the_best_fixed_count():
    m = Machine(busy_from=0.0)
    p = policy_on(m)
    run(p, Machine(), 0)  # nothing measured before: the machine is busy from the start
    steps = run(p, m, 60.0)
    best_fixed = 1 / min(BUSY.values())
    assert tok_s(steps) >= 0.85 * best_fixed
    assert 1 / BUSY[2] < 0.2 * best_fixed  # the plan's count would have kept a fifth of it


def test_no_probe_while_the_load_figure_is_not_known_yet():
    m = Machine(busy_from=0.0)
    p = policy_on(m, blind=False)  # a figure will come, but has not yet
    for _ in range(10):
        m.now += 0.09
        p.observe(0.09, 1)
    for _ in range(3):
        m.now += 1.5
        p.observe(1.5, 1)  # collapsed steps: down
    for _ in range(100):
        m.now += 0.13
        p.observe(0.13, 1)
    assert p.current == 1 and len(p.moves) == 1  # never probed on a guess


def test_a_busy_program_seen_before_the_answer_costs_no_collapsed_step():
    m = Machine(busy_from=5.0)
    p = policy_on(m)
    run(p, m, 5.0)  # quiet: measured at 2
    m.now += 1.0  # between two answers the busy program starts; the next reading shows it
    p.observe(0.2, 1, m.others(2), m.cores)  # the answer's first step (its prompt's last token)
    steps = run(p, m, 10.0)
    assert all(n == 1 for _, n, _ in steps)  # no step at the collapsed count
    assert p.note() == "1 of 2 threads: the machine is busy"


def test_busy_from_the_start_without_a_quiet_time_goes_down_on_the_load_figure():
    m = Machine(busy_from=0.0)
    p = policy_on(m)
    steps = run(p, m, 10.0)
    assert steps[0][1] == 2 and steps[1][1] == 1  # one step at 2, then 1 (others take a core)


def test_after_the_busy_program_stops_the_probe_brings_the_full_count_back_within_10s():
    m = Machine(busy_from=2.0, busy_until=30.0)
    p = policy_on(m)
    run(p, m, 29.5 - m.now)
    assert p.current == 1
    steps = run(p, m, 15.0)
    back = next(t for t, n, _ in steps if n == 2)
    assert back - 30.0 <= 10.0
    assert all(n == 2 for t, n, _ in steps if t > back)  # kept: it is faster
    m.now = p.moved.at + 1.0
    assert p.note() == "2 of 2 threads: the machine is free again"
    m.now += 10.0
    assert p.note() == ""  # back at the full count for a while: nothing to say


def test_while_the_program_stays_busy_probes_are_rare_and_short():
    m = Machine(busy_from=1.0)
    p = policy_on(m, full=2)
    run(p, m, 1.0)
    steps = run(p, m, 60.0, blind=True)  # no load figure: it must probe to find out
    probes = [t for t, n, _ in steps if n == 2 and t > 2.0]
    assert 1 <= len(probes) <= 8  # a few one-step probes in a minute
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert all(b > a - 1e-6 for a, b in zip(gaps, gaps[1:], strict=False))  # their wait doubles ...
    assert gaps[-1] <= 16.0 + 2.0  # ... up to 16 s
    assert tok_s(steps, 1.0) >= 0.7 / BUSY[1]  # blind: each probe costs a collapsed step
    assert p.current == 1


def test_without_the_load_figure_the_probe_still_finds_the_machine_free():
    m = Machine(busy_from=1.0, busy_until=20.0)
    p = policy_on(m)
    run(p, m, 20.0, blind=True)
    steps = run(p, m, 20.0, blind=True)
    back = next(t for t, n, _ in steps if n == 2)
    assert back - 20.0 <= 17.0  # blind probes are at most 16 s apart
    assert p.current == 2


def test_slow_steps_on_an_idle_machine_move_nothing():
    # the machine is idle but for us (pages being read in, say): fewer threads would not help
    m = Machine(busy_from=3.0, times={False: QUIET, True: {2: 5 * QUIET[2], 1: 5 * QUIET[1]}})
    p = policy_on(m)
    steps = []
    while m.now < 10.0:
        t = m.times[m.busy()][p.current]
        m.now += t
        steps.append(p.current)
        p.observe(t, 1, 0.0, 2)  # nobody else wants a core
    assert set(steps) == {2} and p.moves == []


def test_a_slowdown_fewer_threads_do_not_cure_is_undone():
    # every count slows alike (say the memory is busy, not the cores): one thread is no faster
    slow_all = {2: 3 * QUIET[2], 1: 3 * QUIET[1]}
    m = Machine(busy_from=3.0, times={False: QUIET, True: slow_all})
    p = policy_on(m)
    steps = run(p, m, 30.0, blind=True)
    later = [n for t, n, _ in steps if t > 10.0]
    assert later.count(2) > 0.9 * len(later)  # back on the faster count, and it stays there
    assert any(mv.why == "fewer threads were no faster" for mv in p.moves)


def test_never_below_one_thread():
    hopeless = {n: 1.0 * n for n in (1, 2, 3, 4)}  # every count slow, and slower each time
    m = Machine(cores=4, busy_from=1.0, times={False: {n: 0.01 for n in (1, 2, 3, 4)},
                                               True: hopeless})
    p = policy_on(m, full=4)
    steps = run(p, m, 120.0)
    assert min(n for _, n, _ in steps) == 1
    assert p.current >= 1
    assert all(1 <= mv.new <= 4 for mv in p.moves)


def test_pinned_never_moves():
    m = Machine(busy_from=1.0)
    p = policy_on(m, pinned=True)
    steps = run(p, m, 20.0)
    assert {n for _, n, _ in steps} == {2}
    assert p.moves == [] and p.note() == ""


def test_decode_and_prompt_batches_each_have_their_own_count():
    m = Machine()
    applied: list[tuple[int, int]] = []
    control = ThreadControl(2, 2, lambda d, b: applied.append((d, b)), clock=m.clock)
    control.load = None  # no reading of this machine in a fast test
    for _ in range(10):  # quiet: both measured at 2
        control.before(True), control.after(True, 1, 0.1)
        control.before(False), control.after(False, 512, 5.12)
    for _ in range(3):  # decode steps collapse; prompt batches do not
        control.before(True), control.after(True, 1, 1.5)
    assert control.decode.current == 1 and control.batch.current == 2
    assert applied[-1] == (1, 1)  # a decode step: both of llama.cpp's counts at the decode one
    control.before(False)
    assert applied[-1] == (1, 2)  # a prompt batch runs on its own count
    control.after(False, 8, 10.0)  # too short a batch to judge: not measured
    assert control.batch.current == 2
    assert control.note() == "1 of 2 threads: the machine is busy"


def test_threads_pinned_control_applies_nothing():
    applied: list = []
    control = ThreadControl(2, 2, lambda d, b: applied.append((d, b)), pinned=True)
    for _ in range(10):
        control.before(True), control.after(True, 1, 5.0)
    assert applied == [] and control.threads == 2 and control.load is None


def test_a_parallel_step_is_judged_against_steps_of_its_own_width():
    m = Machine()
    p = policy_on(m)
    for _ in range(10):
        p.observe(0.1, 1)
    for _ in range(10):
        p.observe(0.3, 4)  # four sequences at once take longer: not a slow streak
    assert p.current == 2 and p.moves == []


@pytest.mark.parametrize("window", [3.0])
def test_recent_rate_is_the_last_seconds_not_the_average(window):
    now = [0.0]
    rate = RecentRate(window, clock=lambda: now[0])
    n = 0
    for _ in range(100):  # 10 s at 10 tok/s
        now[0] += 0.1
        n += 1
        rate.add(n)
    for _ in range(5):  # then 5 s at 1 tok/s
        now[0] += 1.0
        n += 1
        rate.add(n)
    assert rate.tok_s() == pytest.approx(1.0, rel=0.01)
    assert n / now[0] > 5  # the answer's average would still say 7 tok/s


def test_the_status_bar_shows_the_rate_of_the_last_seconds_and_why_the_threads_moved():
    from pocketchat.engines.types import Stats
    from pocketchat.ui.fitline import fit
    from pocketchat.ui.widgets import figures_from_stats, status_parts

    def bar(stats: Stats, state: str, width: int) -> str:
        figures = figures_from_stats(stats, state, None, 8192, None)
        return "".join(sep + text for sep, text, _ in fit(status_parts(figures, "ok"), width))

    stats = Stats(generated_tokens=200, decode_seconds=20.0, recent_tok_s=2.4, threads=1,
                  threads_full=2, threads_note="1 of 2 threads: the machine is busy",
                  context_limit=8192)
    for width in (80, 120):  # the note fits the bar at both widths
        line = bar(stats, "Answering", width)
        assert "2.4 tok/s" in line and "10.0 tok/s" not in line  # not the average
        assert "1 of 2 threads: the machine is busy" in line and len(line) <= width
    line = bar(Stats(generated_tokens=200, decode_seconds=20.0), "Ready", 120)
    assert "10.0 tok/s" in line and "threads" not in line  # nothing moved: no note


def test_the_threads_flag_pins_the_plan_and_nothing_else_does():
    import argparse

    from pocketchat.choose.selection import Selection, add_selection_args
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                    n_threads=3, n_threads_batch=3)
    parser = argparse.ArgumentParser()
    add_selection_args(parser)
    pinned = Selection.from_args(parser.parse_args(["--threads", "3"])).applied(plan)
    free = Selection.from_args(parser.parse_args([])).applied(plan)
    assert pinned.threads_pinned and pinned.n_threads == 3
    assert not free.threads_pinned
