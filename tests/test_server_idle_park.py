"""Park before unload: the real `pocketchat serve` on the starter with a short `--idle-unload`
and a disk tier. The conversation the worker held when it went idle is written to the disk
tier before the worker ends, so the next turn of it, after the reload, reads only its new
message (`cached_tokens` covers the whole first turn, long system prompt and answer)."""

from __future__ import annotations

import pytest

from support.serverproc import running

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow  # a real model and server: the second CI lane

SYSTEM = "You answer questions about a bakery's orders in one short line each. " * 20


def test_the_next_turn_after_an_idle_unload_reads_only_its_new_message(tmp_path):
    pytest.importorskip("llama_cpp")
    args = ["--model", "starter", "--ctx", "2048", "--parallel", "1", "--idle-unload", "0.03",
            "--prompt-cache-disk-mb", "64"]
    with running(args, tmp_path) as srv:
        client = srv.openai(timeout=300)
        model = client.models.list().data[0].id
        ask = [{"role": "system", "content": SYSTEM},
               {"role": "user", "content": "How many loaves for order 1?"}]
        first = client.chat.completions.create(model=model, messages=ask, max_tokens=8,
                                               temperature=0)
        assert first.usage.prompt_tokens > 300  # a long system prompt, read in full
        idle = srv.health_until(lambda b: b.get("status") == "idle")
        assert idle["status"] == "idle" and idle["model_loaded"] is False, idle
        ask += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "And for order 2?"}]
        again = client.chat.completions.create(model=model, messages=ask, max_tokens=8,
                                               temperature=0)
        cached = again.usage.prompt_tokens_details.cached_tokens
        print(f"after the reload: {cached} of {again.usage.prompt_tokens} prompt tokens cached "
              f"(the first turn's prompt: {first.usage.prompt_tokens})")
        assert cached >= first.usage.prompt_tokens  # the whole first turn, its answer too
        assert again.usage.prompt_tokens - cached < 32  # only the new message is read
        assert "loaded again" in srv.log()
