"""Documents with real llama.cpp on the tiny `qwen35moe` (hybrid: its recurrent state cannot be cut
back) and POCKET's real Qwen3.6 template, counted by the engine itself: a file read ahead while
the question is typed leaves only the question to read; a changed question, the same file in
another chat, and the same file after a restart read only the question; the greedy answer is
the cold one token for token; a file three times the context is answered from the passages
retrieved for the question, which name their pages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pocketchat.documents import from_bytes, read_path
from pocketchat.engines.types import ChatOptions, Message
from support.pdfmake import write_pdf

pytestmark = pytest.mark.slow
TESTS = Path(__file__).parent
QUESTION_ROOM = 64  # a question's tokens with the template's turn markers
GREEDY = ChatOptions(temperature=0, max_tokens=6, ignore_eos=True, thinking=False)
SYSTEM = Message("system", "Answer from the document.")
PRICES = ("The sourdough loaf costs four euros and the rye loaf three. " * 14
          + "Deliveries leave at six in the morning. " * 10)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    pytest.importorskip("llama_cpp")
    from support import tinyqwen35

    return tinyqwen35.write_tiny_qwen35moe(tmp_path_factory.mktemp("docs") / "q36.gguf",
                                           chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE)


def engine_for(model: Path, n_ctx: int = 4096, disk: int = 0):
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from support.prompt_disk_run import plan

    return LlamaCppEngine(plan(disk, n_ctx), model, name="q36")


def ask(engine, question: str, doc, *, system: Message = SYSTEM, options=GREEDY):
    chunks = list(engine.chat([system, Message("user", question, attachments=(doc,))], options))
    final = chunks[-1]
    assert final.error is None, final.error
    return "".join(c.text for c in chunks), final.stats


def read_ahead(engine, doc, system: Message = SYSTEM):
    chunks = list(engine.chat([system, Message("user", "", attachments=(doc,))],
                              ChatOptions(read_ahead=True, thinking=False)))
    final = chunks[-1]
    assert final.finish_reason == "stop" and final.error is None, final.error
    assert final.stats.generated_tokens == 0 and not "".join(c.text for c in chunks)
    return chunks


def test_read_ahead_leaves_only_the_question_and_the_answer_is_the_cold_one(model):
    doc = from_bytes(PRICES.encode(), "prices.md")
    cold_engine = engine_for(model)
    try:
        cold, cold_stats = ask(cold_engine, "What does the sourdough cost?", doc)
    finally:
        cold_engine.close()
    assert cold_stats.evaluated_tokens == cold_stats.prompt_length > 500  # all of it read

    engine = engine_for(model)
    try:
        chunks = read_ahead(engine, doc)
        ahead = chunks[-1].stats.evaluated_tokens
        assert ahead > cold_stats.prompt_length - QUESTION_ROOM
        progress = [c.progress for c in chunks if c.progress is not None]
        assert progress and progress[-1].done == progress[-1].total == ahead  # shown as it reads

        warm, stats = ask(engine, "What does the sourdough cost?", doc)
        assert stats.evaluated_tokens < QUESTION_ROOM, stats  # Enter reads only the question
        assert stats.reused_tokens == ahead and stats.prepared_tokens == ahead
        assert stats.prompt_length == cold_stats.prompt_length
        assert warm == cold  # the state read ahead is the state read cold

        other, changed = ask(engine, "When do deliveries leave?", doc)  # a changed question
        assert changed.evaluated_tokens < QUESTION_ROOM and changed.reused_tokens == ahead
    finally:
        engine.close()


def test_a_cancelled_read_ahead_keeps_what_it_read_and_the_answer_goes_on(model):
    import threading

    doc = from_bytes((PRICES * 2).encode(), "long.md")
    engine = engine_for(model)
    try:
        stream = engine.chat([SYSTEM, Message("user", "", attachments=(doc,))],
                             ChatOptions(read_ahead=True, thinking=False))
        first = next(stream)  # the first progress chunk: reading has begun
        assert first.progress is not None and first.progress.done == 0
        threading.Timer(0.05, engine.cancel).start()
        final = list(stream)[-1]
        assert final.finish_reason in ("cancelled", "stop")
        text, stats = ask(engine, "What does rye cost?", doc)
        assert stats.reused_tokens + stats.evaluated_tokens == stats.prompt_length
        assert stats.generated_tokens == GREEDY.max_tokens
    finally:
        engine.close()


def test_a_file_too_long_to_read_ahead_says_what_will_happen(model):
    engine = engine_for(model, n_ctx=1024)
    try:
        final = read_ahead(engine, from_bytes(PRICES.encode(), "prices.md"))[-1]
        assert final.stats.evaluated_tokens == 0
        assert final.stats.retrieval.startswith("the files do not fit the context: nothing was read")
    finally:
        engine.close()


def test_the_same_file_in_another_chat_reads_only_the_question(model):
    doc = from_bytes(PRICES.encode(), "prices.md")
    engine = engine_for(model)
    try:
        _, first = ask(engine, "What does the sourdough cost?", doc)
        assert first.evaluated_tokens == first.prompt_length
        # another conversation takes the live state away
        list(engine.chat([Message("system", "Be brief."), Message("user", "Hello there.")], GREEDY))
        hits = engine.prompt_cache.hits
        _, again = ask(engine, "Which loaf is cheaper?", doc)
        assert again.evaluated_tokens < QUESTION_ROOM, again
        assert engine.prompt_cache.hits == hits + 1
    finally:
        engine.close()


def test_the_same_file_after_a_restart_reads_only_the_question(model, tmp_path):
    path = tmp_path / "prices.md"
    path.write_text(PRICES)

    def lifetime(question: str) -> dict:
        run = subprocess.run([sys.executable, "-m", "support.documents_run", str(model),
                              str(64 * 1024**2), str(path), question], cwd=TESTS,
                             capture_output=True, text=True, timeout=300, env=os.environ)
        assert run.returncode == 0, run.stderr[-2000:]
        return json.loads(run.stdout.strip().splitlines()[-1])

    first = lifetime("What does the sourdough cost?")
    assert first["evaluated"] == first["prompt_length"]
    second = lifetime("Which loaf is cheaper?")  # a new process: the state from the disk tier
    assert second["evaluated"] < QUESTION_ROOM, second
    assert second["reused"] > first["prompt_length"] - QUESTION_ROOM


def test_a_pdf_three_times_the_context_is_answered_from_retrieved_pages(model, tmp_path):
    pages = [[f"Section {i}: the harbour of Lund keeps {i} boats and one lighthouse."] * 6
             for i in range(1, 31)]
    pages[20] = ["The secret ingredient of the harbour soup is saffron from Spain."] * 6
    doc = read_path(write_pdf(tmp_path / "town.pdf", pages))
    engine = engine_for(model, n_ctx=1024)
    try:
        whole = len(engine._encode(doc.text))
        assert whole > 3 * engine.n_ctx  # three times the context
        text, stats = ask(engine, "What is the secret ingredient of the harbour soup?", doc)
        assert stats.retrieval.startswith("the files do not fit the context: ")
        assert "town.pdf, page 21" in stats.sources
        assert stats.prompt_length <= engine.n_ctx - GREEDY.max_tokens
        assert stats.generated_tokens == GREEDY.max_tokens  # answered, not refused
    finally:
        engine.close()


def test_a_question_without_files_renders_as_before_and_says_no_retrieval(model):
    engine = engine_for(model)
    try:
        plain = [SYSTEM, Message("user", "Hello.")]
        assert "<document" not in engine.render(plain, False)
        chunks = list(engine.chat(plain, GREEDY))
        assert chunks[-1].stats.retrieval == "" and chunks[-1].stats.sources == ()
    finally:
        engine.close()
