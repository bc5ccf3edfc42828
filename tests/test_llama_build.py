"""One way to build a llama.cpp model (`engines/llamacpp/load.new_llama`),
carrying the engine's guards wherever it is used (the engine, tests, benchmarks).

Where llama.cpp offers AMX weight buffers, a bare `llama_cpp.Llama` puts the weights in one and
its kernels crash (ggml-org/llama.cpp#20824: on this kind of machine `tests/test_pocket_scale.py`
died of SIGSEGV/SIGILL with a bare `Llama`). What a user would check: llama.cpp's own load log
says which buffer holds the weights. `tests/test_layout.py` keeps every other `Llama(` out."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")

from pocketchat.engines.llamacpp.load import LlamaLog, amx_offered, import_llama, new_llama  # noqa: E402
from pocketchat.store.starter import starter_path  # noqa: E402

pytestmark = pytest.mark.slow  # loads a real model


def _weight_buffers(**kwargs) -> set[str]:
    """The buffer types llama.cpp reports holding model weights for a `new_llama` load."""
    log = LlamaLog.install(import_llama())
    with log.record() as lines:
        llm = new_llama(starter_path(), n_ctx=128, **kwargs)
    llm.close()
    return {ln.split(":", 1)[1].split()[0] for ln in lines if "model buffer size" in ln}


def test_the_weights_never_go_to_amx_buffers():
    got = _weight_buffers()
    assert "CPU_Mapped" in got  # the file's own pages
    assert "AMX" not in got
    if amx_offered():  # the guard: no extra weight buffer types at all on such a machine
        assert got == {"CPU_Mapped"}


def test_a_caller_cannot_switch_the_guard_off():
    def want_extra(params) -> None:
        params.use_extra_bufts = True

    assert "AMX" not in _weight_buffers(model_setup=want_extra)


def test_repack_false_is_no_repack():
    assert _weight_buffers(repack=False) == {"CPU_Mapped"}


def test_vocab_only_models_are_built_the_same_way():
    llm = new_llama(starter_path(), n_ctx=64, vocab_only=True)
    try:
        assert llm.tokenize(b"Hello", add_bos=False)
    finally:
        llm.close()
