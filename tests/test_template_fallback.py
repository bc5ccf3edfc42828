"""A GGUF without a chat template gets llama.cpp's built-in template for its format
(with a note), or runs as a plain completion; never ChatML guessed for every model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pocketchat.engines.answer.template import BuiltinTemplate, PlainCompletion, template_for
from pocketchat.engines.types import ChatOptions, Message

pytest.importorskip("llama_cpp")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


@pytest.fixture(scope="module")
def starter_without_template(tmp_path_factory, starter_gguf) -> Path:
    out = tmp_path_factory.mktemp("notemplate") / "smollm2-no-template.gguf"
    script = Path(sys.executable).with_name("gguf-new-metadata")
    subprocess.run([sys.executable, str(script), "--force", "--remove-metadata", "tokenizer.chat_template",
                    str(starter_gguf), str(out)], check=True, capture_output=True, timeout=120)
    return out


def test_gemma_without_a_template_gets_llama_cpps_gemma_template():
    renderer, note = template_for(None, arch="gemma3", model="gemma-3-1b", has_token=lambda t: False)
    assert isinstance(renderer, BuiltinTemplate) and renderer.name == "gemma"
    assert "no chat template" in note and "'gemma'" in note
    text = renderer.apply(MESSAGES, generation=True)
    assert "<start_of_turn>user\n" in text and "Hi there" in text and text.endswith("<start_of_turn>model\n")
    assert "<|im_start|>" not in text


def test_an_unknown_format_runs_as_a_plain_completion():
    renderer, note = template_for(None, arch="someneox", model="base-model", has_token=lambda t: False)
    assert isinstance(renderer, PlainCompletion) and "plain text completion" in note
    assert renderer.apply(MESSAGES, generation=True) == "Be brief.\n\nHi there"


@pytest.mark.slow
def test_a_real_gguf_without_template_uses_the_format_its_tokens_tell_and_says_so(starter_without_template):
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=1024, n_threads=2,
                    n_threads_batch=2)
    engine = LlamaCppEngine(plan, starter_without_template, name="SmolLM2 (no template)")
    try:
        assert isinstance(engine.template, BuiltinTemplate) and engine.template.name == "chatml"
        assert any("'chatml'" in n and "no chat template" in n for n in engine.info.notes)
        prompt = engine.render([Message("user", "Hi")], True)
        assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        answer = "".join(c.text for c in engine.chat([Message("user", "Say hello.")],
                                                     ChatOptions(max_tokens=12, temperature=0.0)))
        assert answer and "<|im_start|>" not in answer
    finally:
        engine.close()


def test_the_chat_shows_the_engines_note():
    from support.scripted_engine import Factory, ScriptedEngine
    from support.uitools import SIZE, ready, run, screen_text
    from pocketchat.engines.types import EngineInfo
    from pocketchat.ui.app import create_app

    note = "gemma-3-1b has no chat template: using llama.cpp's built-in 'gemma' template (gemma3 architecture)."
    engine = ScriptedEngine(info=EngineInfo(backend="llama.cpp", model="gemma-3-1b", placement="CPU, 2 threads",
                                            n_ctx=4096, notes=(note,)))

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.pause(0.1)
            assert "has no chat template: using llama.cpp's built-in 'gemma'" in screen_text(app)

    run(scenario())
