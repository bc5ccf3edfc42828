"""The worker process: crashes become EngineCrashed, load errors keep their type, restarts work."""

from __future__ import annotations

import os
import signal

import pytest

from support.engine_makers import llama_plan
from pocketchat.errors import CorruptModel, EngineCrashed
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.modelfile.gguf import check_gguf
from pocketchat.engines.worker.process import describe_exit
from pocketchat.engines.worker.parent import WorkerEngine

pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

LONG = ChatOptions(max_tokens=2000, ignore_eos=True)


def test_kill_9_mid_answer_is_engine_crashed_and_a_new_engine_works(starter_gguf):
    conversation = [Message("system", "Be brief."), Message("user", "Tell me a long story.")]
    before = list(conversation)
    eng = WorkerEngine(llama_plan(512), starter_gguf)
    it = eng.chat(conversation, LONG)
    first = next(it)
    assert first.finish_reason is None
    os.kill(eng.pid, signal.SIGKILL)
    with pytest.raises(EngineCrashed) as info:
        for _ in it:
            pass
    assert info.value.exitcode == -signal.SIGKILL
    assert "SIGKILL" in info.value.message
    assert info.value.hint  # tells the user what to do
    assert conversation == before
    with pytest.raises(EngineCrashed):  # the dead engine says so at once
        list(eng.chat(conversation, LONG))
    eng.close()

    again = WorkerEngine(llama_plan(512), starter_gguf)
    try:
        final = list(again.chat(conversation, ChatOptions(max_tokens=8, ignore_eos=True)))[-1]
        assert final.finish_reason == "length" and final.stats.generated_tokens == 8
    finally:
        again.close()


def test_native_output_goes_to_a_log_and_its_tail_is_in_the_crash_message(starter_gguf):
    eng = WorkerEngine(llama_plan(512), starter_gguf)
    # What llama.cpp prints before an abort lands in the worker's log, not on the chat screen.
    with open(eng.log_path, "a") as log:
        log.write("GGML_ASSERT(n_tokens <= n_batch) failed\n")
    os.kill(eng.pid, signal.SIGABRT)
    with pytest.raises(EngineCrashed) as info:
        list(eng.chat([Message("user", "hi")], LONG))
    assert "SIGABRT" in info.value.message
    assert "GGML_ASSERT(n_tokens <= n_batch) failed" in info.value.message
    assert eng.log_path in info.value.message
    eng.close()
    assert os.path.exists(eng.log_path)  # kept for the bug report

    fine = WorkerEngine(llama_plan(512), starter_gguf)
    fine.close()
    assert not os.path.exists(fine.log_path)


def test_segfault_is_reported_with_its_signal_name():
    assert "SIGSEGV" in describe_exit(-signal.SIGSEGV)
    assert "SIGABRT" in describe_exit(-signal.SIGABRT)
    assert "code 3" in describe_exit(3)


def test_load_error_is_reraised_with_the_same_type_and_message(starter_gguf, tmp_path):
    bad = tmp_path / "half.gguf"
    with open(starter_gguf, "rb") as src, open(bad, "wb") as dst:
        dst.write(src.read(starter_gguf.stat().st_size // 2))
    with pytest.raises(CorruptModel) as expected:
        check_gguf(bad)
    with pytest.raises(CorruptModel) as got:
        WorkerEngine(llama_plan(512), bad)
    assert got.value.message == expected.value.message
    assert got.value.hint == expected.value.hint


def test_wait_false_then_wait_ready_reports_progress(starter_gguf):
    seen = []
    eng = WorkerEngine(llama_plan(512), starter_gguf, name="starter", wait=False, on_progress=lambda s, f: seen.append((s, f)))
    try:
        assert eng.wait_ready(60)
        assert eng.ready and eng.progress == ("ready", 1.0)
        stages = [s for s, _ in seen]
        assert "loading" in stages and stages[-1] == "ready"
        fractions = [f for s, f in seen if s == "loading"]
        assert fractions == sorted(fractions)
        assert eng.info.model == "starter"
    finally:
        eng.close()


def test_abandoned_answer_then_cancel_race_then_next_answer(starter_gguf):
    eng = WorkerEngine(llama_plan(512), starter_gguf)
    try:
        it = eng.chat([Message("user", "Count to a thousand.")], LONG)
        next(it)
        it.close()  # the reader walks away: the worker is told to stop and the pipe drained
        final = list(eng.chat([Message("user", "Hi")], ChatOptions(max_tokens=5, ignore_eos=True)))[-1]
        assert final.finish_reason == "length"
        chunks = list(eng.chat([Message("user", "Hi again")], ChatOptions(max_tokens=40, ignore_eos=True)))
        # coalesced: far fewer pipe messages than tokens, first one early
        assert len(chunks) < 40 and chunks[-1].stats.generated_tokens == 40
    finally:
        eng.close()
    eng.close()  # twice is fine


def test_unknown_backend_module_missing_is_backend_missing(starter_gguf, monkeypatch):
    from pocketchat.errors import BackendMissing
    from pocketchat.engines.worker import child
    monkeypatch.setitem(child.BACKENDS, "mlx", ("pocketchat.engines.no_such_module", "X"))
    from dataclasses import replace

    with pytest.raises(BackendMissing):
        child.make_backend(replace(llama_plan(512), backend="mlx"), starter_gguf, None)
