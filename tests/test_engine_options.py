"""Sampling options per request, and why an answer stopped, on real models.

The base merges every sampling field of the request over the plan's defaults once; these tests
check that the fields reach the sampler (the answer changes the way a user would see), and that
`Stats.stop_reason` tells a token cap from a full context, a natural end and a cancel.
"""

from __future__ import annotations

import pytest

from support.engine_makers import llama_plan, make_llama_in_process, make_mlx_in_process
from pocketchat.engines.answer.sampling import merge_sampling
from pocketchat.engines.types import ChatOptions, Message
from pocketchat.types import LoadPlan, Sampling
pytestmark = pytest.mark.slow

N_CTX = 256


def answer(engine, question: str, **options):
    chunks = list(engine.chat([Message("user", question)], ChatOptions(**options)))
    return "".join(c.text for c in chunks), chunks[-1]


def test_request_fields_override_the_plan_defaults_and_none_keeps_them():
    plan = Sampling(temperature=0.7, top_p=0.8, top_k=40, min_p=0.05, repeat_penalty=1.1)
    kept = merge_sampling(plan, ChatOptions())
    assert (kept.temperature, kept.top_p, kept.top_k, kept.min_p, kept.repeat_penalty) == (
        0.7, 0.8, 40, 0.05, 1.1)
    assert kept.presence_penalty == kept.frequency_penalty == 0.0 and kept.seed is None
    got = merge_sampling(plan, ChatOptions(temperature=0.0, min_p=0.3, repeat_penalty=1.4,
                                           presence_penalty=0.5, frequency_penalty=0.25, seed=9))
    assert (got.temperature, got.min_p, got.repeat_penalty, got.presence_penalty,
            got.frequency_penalty, got.seed) == (0.0, 0.3, 1.4, 0.5, 0.25, 9)
    assert got.greedy and got.top_p == 0.8  # untouched fields keep the plan's value


@pytest.fixture(scope="module")
def starter():
    eng = make_llama_in_process(1024)
    yield eng
    eng.close()


def test_repeat_penalty_per_request_stops_a_greedy_loop(starter):
    question = "Write the word cat ten times."
    plain, final = answer(starter, question, temperature=0, max_tokens=40)
    assert plain.lower().count("cat") >= 8  # greedy, no penalty: the starter loops on it
    penalised, _ = answer(starter, question, temperature=0, max_tokens=40, repeat_penalty=1.5)
    assert penalised != plain
    assert penalised.lower().count("cat") < plain.lower().count("cat")
    again, _ = answer(starter, question, temperature=0, max_tokens=40)
    assert again == plain  # the penalty belonged to that request only


def test_presence_penalty_per_request_changes_the_answer(starter):
    question = "Write the word cat ten times."
    plain, _ = answer(starter, question, temperature=0, max_tokens=30)
    other, _ = answer(starter, question, temperature=0, max_tokens=30, presence_penalty=1.5)
    assert other != plain


def test_min_p_per_request_makes_a_hot_sampler_keep_to_the_likeliest_tokens(starter):
    question = "Tell me about cats."
    hot = {answer(starter, question, temperature=1.5, max_tokens=12, seed=s)[0] for s in (1, 2, 3)}
    assert len(hot) == 3  # at temperature 1.5 each seed writes something else
    kept = {answer(starter, question, temperature=1.5, max_tokens=12, seed=s, min_p=0.9)[0]
            for s in (1, 2, 3)}
    assert len(kept) == 1  # min_p 0.9 leaves (nearly) only the likeliest token at each step


def _engines(tiny_path):
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine

    yield "starter", make_llama_in_process(N_CTX)
    yield "tiny-qwen35moe", LlamaCppEngine(llama_plan(N_CTX), tiny_path, name="tiny-qwen35moe")
    pytest.importorskip("mlx_lm")
    yield "mlx", make_mlx_in_process(N_CTX)


def test_stop_reason_says_cap_context_or_cancelled_on_every_backend(tiny_qwen35moe):
    for label, eng in _engines(tiny_qwen35moe):
        try:
            _, final = answer(eng, "Tell me a story.", max_tokens=5, ignore_eos=True)
            assert (final.finish_reason, final.stats.stop_reason) == ("length", "cap"), label
            assert final.stats.generated_tokens == 5, label

            _, final = answer(eng, "Tell me a long story.", ignore_eos=True, seed=1)
            assert (final.finish_reason, final.stats.stop_reason) == ("length", "context"), label
            assert final.stats.context_used >= N_CTX - 1, label

            chunks = []
            for chunk in eng.chat([Message("user", "Another story?")],
                                  ChatOptions(max_tokens=200, ignore_eos=True)):
                chunks.append(chunk)
                if len(chunks) == 2:
                    eng.cancel()
            assert (chunks[-1].finish_reason, chunks[-1].stats.stop_reason) == (
                "cancelled", "cancelled"), label
            assert all(c.stats.stop_reason is None for c in chunks[:-1]), label
        finally:
            eng.close()


def test_stop_reason_stop_when_the_model_ends_its_answer(starter):
    _, final = answer(starter, "Say only: yes", max_tokens=64, seed=1)
    assert (final.finish_reason, final.stats.stop_reason) == ("stop", "stop")


def test_stop_reason_stop_on_mlx():
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import shared_model
    from pocketchat.engines.mlx.engine import MlxEngine

    eng = MlxEngine(LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=512,
                             n_threads=2, n_threads_batch=2), shared_model("scripted"))
    try:  # the scripted model answers "Hello" and ends its turn
        text, final = answer(eng, "hi", max_tokens=20, temperature=0, thinking=False)
        assert text == "Hello"
        assert (final.finish_reason, final.stats.stop_reason) == ("stop", "stop")
    finally:
        eng.close()


def test_the_worker_passes_stop_reason_and_new_options_through():
    from pocketchat.engines.worker.parent import WorkerEngine
    from pocketchat.store.starter import starter_path

    eng = WorkerEngine(llama_plan(512), starter_path(), name="starter")
    try:
        question = "Write the word cat ten times."
        plain, final = answer(eng, question, temperature=0, max_tokens=40)
        assert final.stats.stop_reason == "cap"
        penalised, _ = answer(eng, question, temperature=0, max_tokens=40, repeat_penalty=1.5)
        assert penalised != plain
    finally:
        eng.close()


def test_one_load_error_classifier_for_both_backends():
    from pocketchat.engines.loaderror import load_error
    from pocketchat.errors import CorruptModel, EngineError, ModelTooLarge

    for backend in ("llama.cpp", "mlx"):
        err = load_error(backend, "m.gguf", "ggml: failed to allocate 9 GB buffer")
        assert isinstance(err, ModelTooLarge) and "not enough memory to load m.gguf" in err.message
        err = load_error(backend, "m", "error loading model: unknown model architecture: 'x'")
        assert type(err) is EngineError and f"this {backend} cannot run m" in err.message
        assert "Update" in err.hint
    assert isinstance(load_error("mlx", "m", "Model type foo not supported."), EngineError)
    assert isinstance(load_error("mlx", "m", "bad header"), CorruptModel)
    assert type(load_error("llama.cpp", "m", "bad header")) is EngineError
