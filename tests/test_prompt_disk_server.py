"""The disk tier through the real server (`pocketchat serve` on 127.0.0.1, the real `openai`
client, the tiny `qwen35moe`): /health's `cache` shows both tiers, and a server started again
reads only what follows a long system prompt it read before (`cached_tokens`)."""

from __future__ import annotations


import pytest

from support import tinyqwen35
from support.serverproc import running

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

SYSTEM = "You review pull requests of a small bakery's web shop; answer in one line. " * 14

@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    return tinyqwen35.write_tiny_qwen35moe(tmp_path_factory.mktemp("pdisk") / "q35.gguf",
                                           chat_template=tinyqwen35.QWEN35_TEMPLATE)


def serve(gguf, tmp_path, *extra: str):
    return running(["--model", str(gguf), "--ctx", "4096", "--threads", "1", "--parallel", "1",
                    *extra], tmp_path)


def ask(srv) -> tuple[int, int]:
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    reply = client.chat.completions.create(
        model=client.models.list().data[0].id, max_tokens=4, temperature=0,
        messages=[{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": "Is the new price rounding right?"}])
    return reply.usage.prompt_tokens, reply.usage.prompt_tokens_details.cached_tokens




def test_health_shows_the_disk_tier_beside_the_ram_tier(gguf, tmp_path):
    with serve(gguf, tmp_path, "--prompt-cache-disk-mb", "0") as srv:
        ask(srv)
        disk = srv.disk_after("budget", 0)
        _, body = srv.get("/health")
    cache = body["cache"]
    assert {"entries", "bytes", "budget", "hits"} <= set(cache)
    assert {"entries", "bytes", "budget", "hits"} <= set(disk) and disk["budget"] == 0


def test_a_restarted_server_reads_only_what_follows_the_system_prompt(gguf, tmp_path):
    with serve(gguf, tmp_path, "--prompt-cache-disk-mb", "64") as srv:
        total, cached = ask(srv)
        first = srv.disk_after("writes", 1)
    assert cached == 0 and first["writes"] == 1 and first["budget"] == 64 * 1024**2
    with serve(gguf, tmp_path, "--prompt-cache-disk-mb", "64") as srv:
        again, cached = ask(srv)
        second = srv.disk_after("hits", 1)
    assert again == total and cached >= len(SYSTEM) - 64 and second["hits"] == 1
