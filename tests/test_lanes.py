"""Who answers in the worker (`engines/worker/lanes.Requests`, `batcher.Batcher.serve`): with several
sequences the step thread is the first lane, so a lone conversation decodes in the thread that
runs its token loop (no hand-over per token), a second one is taken by another lane while it
answers and shares its steps, and the step thread waiting for anything else still leads them."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from pocketchat.engines.batch.batcher import Batcher, Work
from pocketchat.engines.worker.lanes import Requests
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.types import LoadPlan
from support.served import Served
from test_batcher import Recorder


def taker(requests: Requests) -> tuple[threading.Thread, list]:
    """A lane's `take` in a thread of its own; what it took lands in the list."""
    got: list = []
    thread = threading.Thread(target=lambda: got.append(requests.take()), daemon=True)
    thread.start()
    return thread, got


def test_the_front_takes_whenever_it_is_free_and_the_lanes_only_while_it_answers():
    requests = Requests(front=True)
    requests.put(("status", 1))  # over at once (the server asks after each answer)
    requests.put(("chat", 2))
    lane, got = taker(requests)
    assert requests.take_front() == ("status", 1)
    lane.join(0.2)
    assert lane.is_alive() and got == []  # the conversation's turn is still left to the front
    assert requests.take_front() == ("chat", 2)
    requests.delivered()
    requests.close()
    lane.join(5)
    assert got == [None]
    requests = Requests(front=True)
    requests.put(("chat", "a"))
    requests.put(("chat", "b"))
    lane, got = taker(requests)
    lane.join(0.2)
    assert lane.is_alive() and got == []  # the front is free: both wait for it
    assert requests.take_front() == ("chat", "a")
    lane.join(5)
    assert got == [("chat", "b")]  # the front answers: a lane takes what comes next
    requests.delivered()  # the front settles what it delivered
    requests.put(("chat", "c"))
    lane, got = taker(requests)
    lane.join(0.2)
    assert lane.is_alive() and got == []  # the conversation's next turn is left to the front
    assert requests.take_front() == ("chat", "c")
    assert requests.take_front() is None  # nothing more: the front never waits here
    requests.close()
    lane.join(5)
    assert got == [None]


def test_without_a_front_lanes_take_requests_in_turn_until_closed():
    requests = Requests()
    requests.put(("a",))
    requests.put(("b",))
    assert [requests.take(), requests.take()] == [("a",), ("b",)]
    requests.close()
    assert requests.take() is None


def served_by_the_step_thread(batcher: Batcher, job) -> threading.Event:
    """Hand `job` to the step thread once; the event is set when it has run."""
    ran = threading.Event()
    jobs = [job]

    def take():
        if not jobs:
            return None
        run = jobs.pop()

        def wrapped() -> None:
            try:
                run()
            finally:
                ran.set()
        return wrapped

    batcher.serve(take)
    batcher.wake()
    return ran


def test_an_answer_on_the_step_thread_decodes_inline_and_carries_the_others_tokens():
    rec = Recorder()
    batcher = Batcher(rec, 64, wait=5.0)  # a long wait: only company completes a step
    both = threading.Barrier(2)
    out: dict[int, list] = {0: [], 1: []}
    where: dict[int, int] = {}

    def answer(seq: int) -> None:
        where[seq] = threading.get_ident()
        with batcher.member(seq):
            both.wait(5)
            for pos in range(4):
                out[seq].append(batcher.decode(Work(seq, [1], pos, sample=lambda i: i)))

    ran = served_by_the_step_thread(batcher, lambda: answer(0))
    other = threading.Thread(target=answer, args=(1,))
    other.start()
    assert ran.wait(10)
    other.join(10)
    batcher.close()
    assert set(rec.threads) == {where[0]}  # every step in the answering step thread
    assert where[1] != where[0]
    assert rec.steps == [[(0, 0, 1), (1, 0, 1)]] * 4 or rec.steps == [[(1, 0, 1), (0, 0, 1)]] * 4
    assert sorted(out[0] + out[1]) == [0] * 4 + [1] * 4  # each sampled at its own index


def test_the_step_thread_waiting_for_something_else_still_leads_the_others_steps():
    """As when its next request waits for another sequence to settle (`Sequences._run`)."""
    rec = Recorder()
    batcher = Batcher(rec, 64)
    settled = threading.Event()
    waited: list = []

    def settle(seq: int) -> None:
        with batcher.member(seq):
            for pos in range(3):
                batcher.decode(Work(seq, [1], pos))
        settled.set()

    def wait_for_it() -> None:
        start = time.monotonic()
        waited.append((batcher.idle(settled.is_set, 30.0), time.monotonic() - start,
                       threading.get_ident()))

    other = threading.Thread(target=settle, args=(1,))
    other.start()
    ran = served_by_the_step_thread(batcher, wait_for_it)
    assert ran.wait(30)
    other.join(10)
    batcher.close()
    (became, seconds, thread), = waited
    assert became and seconds < 10  # not the 30 s it would wait with nobody leading
    assert len(rec.steps) == 3 and set(rec.threads) == {thread}


# -- the worker's serving loop on the starter, two sequences ------------------------------


@pytest.fixture
def two_on_starter(starter_gguf):
    from pocketchat.engines.worker.child import make_backend

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=1024,
                    n_threads=2, n_threads_batch=2, parallel=2)
    engines = make_backend(plan, starter_gguf, "starter")
    steps: list[int] = []  # the thread of every llama_decode
    answers: list[int] = []  # the thread that ran each answer's token loop
    run_step, chat = engines.batcher._run_step, engines.chat

    def recorded_step(parts):
        steps.append(threading.get_ident())
        return run_step(parts)

    def recorded_chat(messages, options=None):
        answers.append(threading.get_ident())
        return chat(messages, options)

    engines.batcher._run_step = recorded_step
    engines.chat = recorded_chat
    served = Served(engines)
    yield served, engines, steps, answers
    served.close()


OPTIONS = ChatOptions(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.mark.slow
def test_one_conversation_at_parallel_two_is_decoded_in_the_thread_that_answers_it(
        two_on_starter):
    served, engines, steps, answers = two_on_starter
    for turn in ("Name a fruit.", "Name another."):
        chunks = served.chat(payload=(Message("user", turn),), options=OPTIONS)
        assert chunks[-1].finish_reason == "length"
        assert chunks[-1].stats.generated_tokens == 12
    assert len(set(answers)) == 1, "the turns were answered by different lanes"
    assert set(steps) == set(answers)  # no token was handed to another thread to decode


@pytest.mark.slow
def test_two_conversations_at_once_share_steps_of_the_one_decoding_thread(two_on_starter):
    served, engines, steps, answers = two_on_starter
    long = dataclasses.replace(OPTIONS, max_tokens=48)
    reqs = [served.send(payload=(Message("user", p),), options=long)
            for p in ("Count to twenty.", "Name ten colours.")]
    finished: dict[int, object] = {}
    while len(finished) < 2:
        assert served.conn.poll(30), "the worker stopped answering"
        kind, req, chunk = served.conn.recv()
        assert kind == "chunk" and req in reqs
        if chunk.finish_reason is not None:
            finished[req] = chunk
    assert [finished[r].finish_reason for r in reqs] == ["length", "length"]
    assert len(set(answers)) == 2  # the second was taken by a lane while the first answered
    assert len(set(steps)) == 1 and set(steps) <= set(answers)
    assert engines.batcher.max_width == 2
