"""Conversations that take turns through the real server keep their state:
the tiny random-weight `qwen35moe` (POCKET's hybrid architecture: its recurrent state cannot be
cut back, so without the cache each switch re-reads the whole conversation), `pocketchat serve`
on 127.0.0.1, the real `openai` client. Three conversations continued in turn for six rounds:
from round 2 on each request evaluates at most its new message + 64 tokens (read from `usage`);
a fourth conversation with the first one's 1,000-token system prompt evaluates only what
follows it (+64); /health shows the cache's figures."""

from __future__ import annotations

import time

import pytest

from support import interleaved, tinyqwen35
from support.serverproc import running

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

SLACK = 64  # the bar: the new tokens + 64 (role headers, generation prompt)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    home = tmp_path_factory.mktemp("pcache")
    return tinyqwen35.write_tiny_qwen35moe(home / "tiny-qwen35moe.gguf",
                                           chat_template=tinyqwen35.QWEN35_TEMPLATE)


def serve(gguf, tmp_path, *extra: str):
    # One sequence: conversations that take turns must be parked and restored (with several,
    # each may stay live on its own sequence and the cache holds fewer entries).
    return running(["--model", str(gguf), "--ctx", "4096", "--threads", "1", "--parallel", "1",
                    *extra], tmp_path)


def client_of(srv):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0,
                           timeout=300)
    return client, client.models.list().data[0].id


def cache_after(srv, hits: int, timeout: float = 30) -> tuple[int, dict]:
    """/health once its cache figures count `hits` (they are asked after each answer)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = srv.get("/health")
        if body.get("cache", {}).get("hits", 0) >= hits or time.monotonic() > deadline:
            return status, body
        time.sleep(0.05)


def test_interleaved_conversations_evaluate_only_their_new_tokens(gguf, tmp_path):
    with serve(gguf, tmp_path) as srv:
        client, model = client_of(srv)
        rows = interleaved.run(client, model)
        status, health = cache_after(srv, hits=3 * 5 + 1)
    *turns, fourth = rows
    assert all(row.evaluated == row.counted for row in rows), rows  # cached_tokens: the truth
    for row in turns:
        if row.round == 1:
            assert row.cached_tokens == 0, row  # nothing to continue from yet
            continue
        assert row.evaluated <= row.new_tokens + SLACK, row
    system = len(interleaved.SYSTEM)
    assert fourth.cached_tokens >= system, fourth
    assert fourth.evaluated <= fourth.prompt_tokens - system + SLACK, fourth
    cache = health["cache"]
    assert status == 200 and 0 < cache["bytes"] <= cache["budget"], health
    assert cache["entries"] >= 4, health  # the 3 conversations and the system prompt


def test_budget_zero_turns_it_off_and_cached_tokens_stay_true(gguf, tmp_path):
    with serve(gguf, tmp_path, "--prompt-cache-mb", "0") as srv:
        client, model = client_of(srv)
        rows = interleaved.run(client, model, rounds=2)
        _, health = cache_after(srv, hits=0)
    assert health["cache"]["budget"] == 0 and health["cache"]["entries"] == 0
    later = [r for r in rows if r.round == 2]
    # Each switch re-reads the whole conversation: nothing of it comes from a cache.
    assert all(r.cached_tokens == 0 and r.counted == r.prompt_tokens for r in later), later
