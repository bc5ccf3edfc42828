"""The batcher's steps (`engines/batch/batcher.Batcher`) with a recording decoder in place of llama.cpp:
a lone sequence's token is a step of its own, sequences that decode together share one step
(each sampling at its own batch index), every step runs in the one step thread whoever
submits, a newcomer's prompt goes in chunks while others decode, a cancelled work leaves
before its step."""

from __future__ import annotations

import threading
import time

import pytest

from pocketchat.engines.batch.batcher import Batcher, StepCancelled, Work


class Recorder:
    """A `run_step` that records each step's parts as (seq, start, count) and its thread."""

    def __init__(self) -> None:
        self.steps: list[list[tuple[int, int, int]]] = []
        self.threads: list[int] = []

    def __call__(self, parts) -> int:
        self.steps.append([(w.seq, start, n) for w, start, n in parts])
        self.threads.append(threading.get_ident())
        return 0


def test_a_lone_sequence_decodes_each_token_in_its_own_step():
    rec = Recorder()
    batcher = Batcher(rec, 64)
    with batcher.member(0):
        out = [batcher.decode(Work(0, [t], t, sample=lambda i, t=t: (t, i))) for t in range(5)]
    batcher.close()
    assert out == [(t, 0) for t in range(5)]  # each sampled at batch index 0
    assert rec.steps == [[(0, 0, 1)]] * 5
    assert batcher.max_width == 1


def test_every_step_runs_in_one_thread_whoever_submits():
    """llama.cpp's CPU backend keeps a thread pool per calling thread: one caller, one pool."""
    rec = Recorder()
    batcher = Batcher(rec, 64)

    def run(seq: int) -> None:
        with batcher.member(seq):
            for pos in range(3):
                batcher.decode(Work(seq, [1], pos, sample=lambda i: i))

    threads = [threading.Thread(target=run, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    run(3)
    batcher.close()
    assert sum(n for step in rec.steps for _, _, n in step) == 12
    assert len(set(rec.threads)) == 1
    assert rec.threads[0] not in {t.ident for t in threads} | {threading.get_ident()}


def test_two_decoding_sequences_share_one_step_and_sample_at_their_own_index():
    rec = Recorder()
    batcher = Batcher(rec, 64, wait=5.0)  # a long wait: only company can complete a step
    results: dict[int, object] = {}
    ready = threading.Barrier(2)

    def run(seq: int) -> None:
        with batcher.member(seq):
            ready.wait()
            results[seq] = batcher.decode(Work(seq, [7], 3, sample=lambda i: i))

    threads = [threading.Thread(target=run, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    batcher.close()
    assert len(rec.steps) == 1 and sorted(rec.steps[0]) == [(0, 0, 1), (1, 0, 1)]
    assert sorted(results.values()) == [0, 1]  # each its own row of the one batch


def test_a_prompt_goes_in_chunks_while_another_sequence_decodes():
    rec = Recorder()
    batcher = Batcher(rec, 64, chunk=8, wait=5.0)
    prompt_done = threading.Event()
    start = threading.Barrier(2)

    def decoder() -> None:
        with batcher.member(0):
            start.wait()
            pos = 0
            while not prompt_done.is_set():
                batcher.decode(Work(0, [1], pos, sample=lambda i: i))
                pos += 1

    def newcomer() -> None:
        with batcher.member(1):
            start.wait()
            batcher.decode(Work(1, list(range(30)), 0, sample=lambda i: i))
        prompt_done.set()

    threads = [threading.Thread(target=decoder), threading.Thread(target=newcomer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    chunks = [n for step in rec.steps for seq, _, n in step if seq == 1]
    assert sum(chunks) == 30
    assert max(chunks) <= 8  # never the whole prompt in one step while another decodes
    shared = [step for step in rec.steps if {s for s, _, _ in step} == {0, 1}]
    assert shared, "the decoder's tokens never rode along with the prompt's chunks"


def test_a_cancelled_work_leaves_before_its_step():
    rec = Recorder()
    batcher = Batcher(rec, 64)
    cancel = threading.Event()
    cancel.set()
    with batcher.member(0), pytest.raises(StepCancelled):
        batcher.decode(Work(0, [1], 0, cancel=cancel))
    assert rec.steps == []


@pytest.mark.parametrize("wake, wait", [(True, 30.0), (False, 0.05)])
def test_a_work_cancelled_while_it_waits_for_company_leaves(wake, wait):
    """With `wake()` at once (the straggler never comes in 30 s); without, when its step comes
    due and finds nothing to run."""
    rec = Recorder()
    batcher = Batcher(rec, 64, wait=wait)
    cancel = threading.Event()
    raised = []

    def run() -> None:
        with batcher.member(0), batcher.member(1):  # seq 1 is a member that never submits
            try:
                batcher.decode(Work(0, [1], 0, cancel=cancel))
            except StepCancelled:
                raised.append(True)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.01)
    cancel.set()
    if wake:
        batcher.wake()
    t.join(2)
    left = raised[:]
    batcher.close()
    t.join(5)
    assert left == [True] and rec.steps == []


def test_a_failed_step_is_the_submitters_error_and_the_batcher_goes_on():
    codes = [1, 0]
    batcher = Batcher(lambda parts: codes.pop(0), 64)
    with batcher.member(0):
        with pytest.raises(Exception, match="llama_decode returned 1"):
            batcher.decode(Work(0, [1], 0))
        assert batcher.decode(Work(0, [1], 0, sample=lambda i: "next")) == "next"
    batcher.close()

