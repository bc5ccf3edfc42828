"""An error never leaves state behind: every public call of every engine layer (the harness
`EngineBase`, `Sequences` over several sequences, the worker's serving loop, the Python API's
`Session`) is driven into each failure the fake engine can raise, read in each way a caller
reads (to the end, one chunk then closed, one chunk then dropped, dropped unstarted), and then
the same engine answers a plain request. The cyclic garbage collector is off while each case
runs: a guard that only a collection would free counts as stuck (an exception held by the
caller keeps such a cycle alive for good)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from pocketchat.api import Session
from pocketchat.engines.batch.sequences import Sequences
from pocketchat.engines.types import ChatOptions, Chunk, Message
from pocketchat.errors import EngineError, PocketchatError, UnsupportedRequest
from support.faulty_engine import FaultyEngine
from support.served import Served

HI = (Message("user", "Say hello."),)
SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}
READS = ("to_end", "first_then_close", "first_then_drop", "unstarted_drop")
ERRORS = {
    "runtime": lambda: RuntimeError("the backend broke"),
    "unsupported": lambda: UnsupportedRequest("this schema cannot be enforced", param="response_format"),
    "interrupt": lambda: KeyboardInterrupt(),
}
CHAT_POINTS = ("render", "encode", "constraint", "generate", "step", "settle")
COMPLETE_POINTS = ("encode", "generate", "step")


@pytest.fixture(autouse=True)
def no_cycle_collection():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def constrained(point: str) -> ChatOptions:
    """Options that reach `point` (a response_format needs the constraint's tokenizer)."""
    return ChatOptions(response_format={"type": "json_object"}) if point == "constraint" else ChatOptions()


def read(answer, how: str) -> list[Chunk]:
    """Read an answer as a caller may; the chunks read (an exception raised while reading
    propagates, as it does to the caller)."""
    if how == "unstarted_drop":
        del answer
        return []
    if how == "to_end":
        return list(answer)
    first = next(answer)
    if how == "first_then_close":
        answer.close()
    else:
        del answer
    return [first]


def served_plainly(chunks: list[Chunk]) -> None:
    assert chunks[-1].finish_reason == "stop", chunks[-1]
    assert "".join(c.text for c in chunks) == FaultyEngine.reply


def drive(start, point: str, error: str, how: str, holder: list) -> None:
    """Start an answer with a failure armed at `point` and read it `how`; whatever the
    caller sees (an error chunk, a raised error) is kept in `holder`, as a caller keeps it."""
    try:
        chunks = read(start(), how)
        holder.append(chunks)
        if chunks and chunks[-1].finish_reason == "error":
            assert chunks[-1].failure is not None
    except (PocketchatError, RuntimeError, KeyboardInterrupt) as exc:
        holder.append(exc)


# -- the harness (EngineBase) ----------------------------------------------------------------


@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("point", CHAT_POINTS)
def test_a_failed_chat_leaves_the_engine_ready(point, error, how):
    engine = FaultyEngine()
    engine.fail(point, ERRORS[error]())
    held: list = []
    drive(lambda: engine.chat(HI, constrained(point)), point, error, how, held)
    engine.disarm()
    served_plainly(list(engine.chat(HI)))
    served_plainly(list(engine.chat(HI)))  # and the one after (settled or not)


@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("point", COMPLETE_POINTS)
def test_a_failed_completion_leaves_the_engine_ready(point, error, how):
    engine = FaultyEngine()
    engine.fail(point, ERRORS[error]())
    held: list = []
    drive(lambda: engine.complete("Once upon a time"), point, error, how, held)
    engine.disarm()
    served_plainly(list(engine.complete("Once upon a time")))
    served_plainly(list(engine.chat(HI)))


def test_an_error_chunk_that_the_caller_keeps_does_not_hold_the_engine():
    """The issue's case: the failure's traceback ties it to the answer's frames; a caller that
    keeps the failed chunk (or its exception) and never reads on must not wedge the engine."""
    engine = FaultyEngine()
    engine.fail("constraint", UnsupportedRequest("unsupported schema", param="response_format"))
    answer = engine.chat(HI, ChatOptions(response_format=SCHEMA))
    failed = next(answer)  # the final chunk: an error; the caller stops here, keeping it
    assert failed.finish_reason == "error" and isinstance(failed.failure, UnsupportedRequest)
    served_plainly(list(engine.chat(HI)))
    # A caller that keeps a finished answer without reading on does not hold it either.
    kept = engine.chat(HI)
    chunks = [next(kept)]
    while chunks[-1].finish_reason is None:  # up to the final chunk, not past it
        chunks.append(next(kept))
    served_plainly(chunks)
    served_plainly(list(engine.chat(HI)))
    assert failed.failure is not None and kept is not None


@pytest.mark.parametrize("call", ["save_state", "load_state", "status"])
@pytest.mark.parametrize("error", ERRORS)
def test_a_failed_state_call_leaves_the_engine_ready(tmp_path: Path, call, error):
    engine = FaultyEngine()
    served_plainly(list(engine.chat(HI)))
    state = tmp_path / "state.bin"
    assert engine.save_state(state) > 0
    engine.fail({"save_state": "save", "load_state": "load", "status": "status"}[call],
                ERRORS[error]())
    with pytest.raises((RuntimeError, PocketchatError, KeyboardInterrupt)):
        getattr(engine, call)(*(() if call == "status" else (state,)))
    served_plainly(list(engine.chat(HI)))
    assert engine.save_state(state) > 0 and engine.load_state(state) is None
    assert "cache" in engine.status()


def test_a_chat_while_another_runs_is_refused_and_the_first_goes_on():
    engine = FaultyEngine()
    first = engine.chat(HI)
    head = next(first)
    with pytest.raises(EngineError, match="already answering"):
        list(engine.chat(HI))
    served_plainly([head, *first])
    served_plainly(list(engine.chat(HI)))


# -- several sequences (Sequences) ---------------------------------------------------------------


def two_sequences() -> Sequences:
    return Sequences([FaultyEngine(seq=0), FaultyEngine(seq=1)])


@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("point", CHAT_POINTS)
def test_a_failed_answer_frees_its_sequence(point, error, how):
    slots = two_sequences()
    for engine in slots.engines:  # whichever sequence takes it
        engine.fail(point, ERRORS[error]())
    held: list = []
    drive(lambda: slots.chat(HI, constrained(point)), point, error, how, held)
    for engine in slots.engines:
        engine.disarm()
    assert slots.busy == 0
    for _ in range(3):  # more answers than a leaked sequence would leave room for
        served_plainly(list(slots.chat(HI)))
        assert slots.busy == 0


def test_a_sequence_whose_answer_cannot_start_is_freed():
    slots = two_sequences()
    slots.engines[0].close()  # its answers refuse at once (closed)
    slots.engines[1].close()
    slots._closed = False
    for _ in range(3):
        with pytest.raises(EngineError, match="closed"):
            list(slots.chat(HI))
        assert slots.busy == 0


# -- the worker's serving loop (child.main's requests, in a thread over a real pipe) ---------


@pytest.mark.parametrize("error", ["runtime", "unsupported"])
@pytest.mark.parametrize("sequences", [1, 2])
def test_the_worker_answers_after_every_failure(tmp_path: Path, sequences, error):
    engine = FaultyEngine() if sequences == 1 else two_sequences()
    engines = [engine] if sequences == 1 else engine.engines
    served = Served(engine)
    try:
        for point in CHAT_POINTS:
            for e in engines:
                e.fail(point, ERRORS[error]())
            got = served.chat(options=constrained(point))
            if point != "settle":
                assert got[-1].finish_reason == "error", (point, got[-1])
                assert isinstance(got[-1].failure, PocketchatError)
            for e in engines:
                e.disarm()
            served_plainly(served.chat())
        for point in COMPLETE_POINTS:
            for e in engines:
                e.fail(point, ERRORS[error]())
            assert served.chat("complete", "Once upon a time")[-1].finish_reason == "error"
            for e in engines:
                e.disarm()  # the sequence that did not take it
            served_plainly(served.chat("complete", "Once upon a time"))
        state = tmp_path / "state.bin"
        for call, point in (("save_state", "save"), ("load_state", "load"), ("status", "status")):
            assert served.call("save_state", state) > 0
            for e in engines:  # whichever sequence the call reaches
                e.fail(point, ERRORS[error]())
            assert isinstance(served.call(call, *(() if call == "status" else (state,))),
                              PocketchatError)
            for e in engines:
                e.disarm()
            served_plainly(served.chat())
        assert served.call("save_state", state) > 0 and served.call("load_state", state) is None
        if sequences > 1:
            assert engine.busy == 0
    finally:
        served.close()


# -- the Python API (Session) ----------------------------------------------------------------


def sessions():
    return [pytest.param(lambda: Session(FaultyEngine()), id="one-sequence"),
            pytest.param(lambda: Session(two_sequences()), id="two-sequences")]


def arm(session: Session, point: str, exc: BaseException) -> None:
    engine = session.engine
    for e in getattr(engine, "engines", [engine]):
        e.fail(point, exc)


@pytest.mark.parametrize("make", sessions())
def test_an_unsupported_schema_leaves_the_session_ready(make):
    """The issue's case through the API: the error raised, kept by the caller, and the next
    calls answer."""
    session = make()
    arm(session, "constraint", UnsupportedRequest("unsupported schema", param="response_format"))
    with pytest.raises(UnsupportedRequest) as info:
        session.chat([{"role": "user", "content": "hi"}], response_format=SCHEMA)
    kept = info.value  # the caller keeps the exception (a REPL keeps the last one)
    assert session.chat([{"role": "user", "content": "hi"}]).text == FaultyEngine.reply
    assert session.complete("Once").text == FaultyEngine.reply
    assert kept.__traceback__ is not None


@pytest.mark.parametrize("make", sessions())
@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("point", CHAT_POINTS)
def test_a_failed_api_answer_leaves_the_session_ready(make, point, error, how):
    session = make()
    arm(session, point, ERRORS[error]())
    held: list = []
    fmt = {"type": "json_object"} if point == "constraint" else None
    drive(lambda: session.chat(list(HI), stream=True, response_format=fmt), point, error, how,
          held)
    if how == "to_end":  # and not streamed: the same rule
        arm(session, point, ERRORS[error]())
        try:
            held.append(session.chat(list(HI), response_format=fmt))
        except (PocketchatError, RuntimeError, KeyboardInterrupt) as exc:
            held.append(exc)
    for e in getattr(session.engine, "engines", [session.engine]):
        e.disarm()
    for _ in range(3):
        assert session.chat(list(HI)).text == FaultyEngine.reply
        assert session.complete("Once").finish_reason == "stop"


@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("point", COMPLETE_POINTS)
def test_a_failed_api_completion_leaves_the_session_ready(point, error, how):
    session = Session(FaultyEngine())
    arm(session, point, ERRORS[error]())
    held: list = []
    drive(lambda: session.complete("Once", stream=True), point, error, how, held)
    session.engine.disarm()
    assert session.complete("Once").text == FaultyEngine.reply
    assert session.chat(list(HI)).text == FaultyEngine.reply


def test_an_answer_that_cannot_start_leaves_the_session_ready():
    """An exception while the engine's answer is being set up (here: the engine's own call
    raises) releases the session's guard."""
    engine = FaultyEngine()
    session = Session(engine)
    real = engine.chat
    calls = []

    def refusing(messages, options=None):
        calls.append(1)
        if len(calls) == 1:
            raise EngineError("the model worker exited with code 1 while sending a request")
        return real(messages, options)

    engine.chat = refusing  # type: ignore[method-assign]
    with pytest.raises(EngineError, match="exited"):
        session.chat(list(HI))
    assert session.chat(list(HI)).text == FaultyEngine.reply


def test_a_finished_stream_kept_unread_does_not_hold_the_session():
    session = Session(FaultyEngine())
    stream = session.chat(list(HI), stream=True)
    chunks = [next(stream)]
    while chunks[-1].finish_reason is None:  # up to the final chunk, not past it
        chunks.append(next(stream))
    assert chunks[-1].finish_reason == "stop"  # the caller got the end and keeps the iterator
    assert session.chat(list(HI)).text == FaultyEngine.reply
    assert list(stream) == []  # reading on later is harmless
    assert session.chat(list(HI)).text == FaultyEngine.reply


def test_an_answer_dropped_unclosed_in_a_cycle_frees_its_sequence_when_collected():
    """A caller's cycle keeps a SequenceAnswer until the collector runs; then its sequence is
    free, even when the collector runs while the sequences' lock is held."""
    slots = two_sequences()
    for _ in range(2):
        answer = slots.chat(HI)
        next(answer)
        holder = {"answer": answer}
        holder["self"] = holder  # a cycle: only the collector frees it
        del answer, holder
    assert slots.busy == 2
    with slots._lock:
        gc.collect()  # the collector inside the lock: must not block
    assert slots.busy == 0
    served_plainly(list(slots.chat(HI)))
