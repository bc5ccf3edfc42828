"""Thinking on the server, through the real HTTP server on 127.0.0.1 and the real clients
(`openai`, `anthropic`): the effort levels and budgets each protocol takes reach the engine as
one budget, a request that says nothing gets `serve --think`'s default, the usage counts the
thought's tokens, and a stream's thinking can be ended mid-way by its id.

The engine is the scripted one (tests/support/scripted_engine.py), which thinks as the real
engines do with a budget (closing line, counts, how the thought ended): the real engines'
budget is the engine's own tests' concern."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Iterator

import pytest
from support.scripted_engine import CLOSING, Reply, ScriptedEngine, tokens

from pocketchat.server.thinking import EFFORT_BUDGETS, ThinkDefault

openai = pytest.importorskip("openai")

LONG_THOUGHT = " ".join(f"s{i}" for i in range(9000))  # never ends by itself within a budget
ANSWER = "The answer is four."
DEFAULT_BUDGET = 64


@contextlib.contextmanager
def serving(engine: ScriptedEngine, default: ThinkDefault = ThinkDefault(True, DEFAULT_BUDGET)
            ) -> Iterator[str]:
    """The server's app over `engine`, served by uvicorn on 127.0.0.1 in a thread: its base URL."""
    import uvicorn

    from pocketchat.server.app import create_app
    from pocketchat.server.host import EngineHost

    host = EngineHost(lambda: engine)
    app = create_app(host, model_id="scripted", thinking=default)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        _wait_ready(url)
        yield url
    finally:
        engine.release.set()
        server.should_exit = True
        thread.join(10)
        sock.close()


def _wait_ready(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/health").status_code == 200:
            return
        time.sleep(0.02)
    raise AssertionError("the server did not become ready")


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=20)


def last_options(engine: ScriptedEngine):
    return engine.calls[-1][1]


ASK = [{"role": "user", "content": "What is 2 + 2?"}]


def test_each_reasoning_effort_level_gives_its_budget_and_no_effort_the_servers():
    engine = ScriptedEngine([Reply(ANSWER, thinking=LONG_THOUGHT)])
    with serving(engine) as url:
        c = client(url)
        for level, (on, budget) in EFFORT_BUDGETS.items():
            if level == "max":  # Anthropic's word; chat completions takes OpenAI's five and xhigh
                continue
            reply = c.chat.completions.create(model="scripted", messages=ASK, max_tokens=50000,
                                              reasoning_effort=level)
            opts = last_options(engine)
            assert (opts.thinking, opts.thinking_budget if opts.thinking else None) == (on, budget), level
            message = reply.choices[0].message
            assert message.content == ANSWER, level  # never empty: the answer follows
            thought = getattr(message, "reasoning_content", None) or ""
            details = reply.usage.completion_tokens_details
            if not on:
                assert thought == "" and details.reasoning_tokens == 0
            elif budget is None:
                assert details.reasoning_tokens == len(tokens(LONG_THOUGHT))
            else:
                assert details.reasoning_tokens == budget + len(tokens(CLOSING)), level
                assert thought.endswith(CLOSING.strip()), level
                assert reply.usage.model_extra["thinking_end"] == "budget"
        reply = c.chat.completions.create(model="scripted", messages=ASK)
        assert last_options(engine).thinking_budget == DEFAULT_BUDGET  # serve --think's default
        assert reply.usage.completion_tokens_details.reasoning_tokens == DEFAULT_BUDGET + len(tokens(CLOSING))
        c.chat.completions.create(model="scripted", messages=ASK,
                                  extra_body={"thinking_budget_tokens": 40, "reasoning_effort": "high"})
        assert last_options(engine).thinking_budget == 40  # the tokens win over the level
        c.chat.completions.create(model="scripted", messages=ASK,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": True}})
        assert last_options(engine).thinking_budget == DEFAULT_BUDGET  # on, the default budget
        c.chat.completions.create(model="scripted", messages=ASK,
                                  extra_body={"thinking_budget_tokens": 0})
        assert not last_options(engine).thinking


def test_a_bad_effort_or_budget_is_a_400_naming_it():
    engine = ScriptedEngine([Reply(ANSWER)])
    with serving(engine) as url:
        c = client(url)
        for body, param in (({"reasoning_effort": "extreme"}, "reasoning_effort"),
                            ({"thinking_budget_tokens": -3}, "thinking_budget_tokens"),
                            ({"thinking_budget_tokens": "lots"}, "thinking_budget_tokens")):
            with pytest.raises(openai.BadRequestError) as err:
                c.chat.completions.create(model="scripted", messages=ASK, extra_body=body)
            assert err.value.body["param"] == param, err.value.body
        assert len(engine.calls) == 0  # refused before the engine


def test_a_server_started_with_think_off_answers_without_thinking_unless_asked():
    engine = ScriptedEngine([Reply(ANSWER, thinking=LONG_THOUGHT)])
    with serving(engine, ThinkDefault(False, None)) as url:
        c = client(url)
        reply = c.chat.completions.create(model="scripted", messages=ASK)
        assert not last_options(engine).thinking
        assert getattr(reply.choices[0].message, "reasoning_content", None) is None
        c.chat.completions.create(model="scripted", messages=ASK, reasoning_effort="low")
        assert (last_options(engine).thinking, last_options(engine).thinking_budget) == (True, 512)


def test_the_end_thinking_control_ends_a_streaming_thought_and_the_answer_follows():
    engine = ScriptedEngine([Reply(ANSWER, thinking=LONG_THOUGHT, hold_after=5)])
    with serving(engine, ThinkDefault(True, None)) as url:
        c = client(url)
        stream = c.chat.completions.create(model="scripted", messages=ASK, stream=True,
                                           stream_options={"include_usage": True})
        thought, content, ended, usage = [], [], None, None
        for event in stream:
            if event.usage is not None:
                usage = event.usage
            if not event.choices:
                continue
            delta = event.choices[0].delta
            thought.append(getattr(delta, "reasoning_content", None) or "")
            content.append(delta.content or "")
            if ended is None and engine.held.is_set():
                ended = c.post(f"/chat/completions/{event.id}/end_thinking", body={},
                               cast_to=object)  # the README's call
        assert ended == {"id": event.id, "object": "end_thinking", "status": "ending"}
        assert engine.thoughts_ended == 1
        assert "".join(content) == ANSWER  # the answer follows on the same stream
        assert "".join(thought).endswith(CLOSING.strip())
        assert usage.completion_tokens_details.reasoning_tokens == 5 + len(tokens(CLOSING))
        assert usage.model_extra["thinking_end"] == "user"
        with pytest.raises(openai.NotFoundError) as err:  # done: nothing in flight by that id
            c.post(f"/chat/completions/{event.id}/end_thinking", body={}, cast_to=object)
        assert err.value.body["code"] == "answer_not_found"


def test_end_thinking_after_the_thought_says_so_and_changes_nothing():
    engine = ScriptedEngine([Reply(ANSWER + " More words follow here.", thinking="Short thought.",
                                   hold_after=4)])
    with serving(engine) as url:
        import httpx

        c = client(url)
        stream = c.chat.completions.create(model="scripted", messages=ASK, stream=True)
        answer, asked = "", False
        for event in stream:
            if event.choices and event.choices[0].delta.content:
                answer += event.choices[0].delta.content
                if engine.held.is_set() and not asked:
                    asked = True
                    r = httpx.post(f"{url}/v1/chat/completions/{event.id}/end_thinking", json={})
                    assert r.status_code == 200 and r.json()["status"] == "not_thinking", r.text
                    engine.release.set()
        assert engine.thoughts_ended == 0 and answer == ANSWER + " More words follow here."


def test_anthropic_thinking_budget_tokens_adaptive_effort_and_disabled():
    anthropic = pytest.importorskip("anthropic")
    engine = ScriptedEngine([Reply(ANSWER, thinking=LONG_THOUGHT)])
    with serving(engine) as url:
        c = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
        msg = c.messages.create(model="scripted", max_tokens=4096, messages=ASK,
                                thinking={"type": "enabled", "budget_tokens": 32})
        assert last_options(engine).thinking_budget == 32
        blocks = {b.type: b for b in msg.content}
        assert blocks["thinking"].thinking.endswith(CLOSING.strip())
        assert blocks["text"].text == ANSWER
        c.messages.create(model="scripted", max_tokens=4096, messages=ASK,
                          thinking={"type": "adaptive"})
        assert last_options(engine).thinking_budget == DEFAULT_BUDGET
        c.messages.create(model="scripted", max_tokens=4096, messages=ASK,
                          thinking={"type": "adaptive"}, extra_body={"output_config": {"effort": "low"}})
        assert last_options(engine).thinking_budget == EFFORT_BUDGETS["low"][1]
        c.messages.create(model="scripted", max_tokens=4096, messages=ASK)
        assert not last_options(engine).thinking  # none given: off, as Anthropic's default


def test_responses_reasoning_effort_and_reasoning_tokens():
    engine = ScriptedEngine([Reply(ANSWER, thinking=LONG_THOUGHT)])
    with serving(engine) as url:
        c = client(url)
        r = c.responses.create(model="scripted", input="What is 2 + 2?", reasoning={"effort": "minimal"})
        assert last_options(engine).thinking_budget == EFFORT_BUDGETS["minimal"][1]
        assert r.usage.output_tokens_details.reasoning_tokens == 128 + len(tokens(CLOSING))
        assert r.output_text == ANSWER
        c.responses.create(model="scripted", input="What is 2 + 2?")
        assert last_options(engine).thinking_budget == DEFAULT_BUDGET
        c.responses.create(model="scripted", input="What is 2 + 2?", reasoning={"effort": "none"})
        assert not last_options(engine).thinking


def test_the_control_is_in_the_published_schema():
    from pocketchat.server.openapi import document

    paths = document()["paths"]
    for base in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
        op = paths[f"{base}/{{id}}/end_thinking"]["post"]
        assert set(op["responses"]) >= {"200", "404"}
    effort = document()["components"]["schemas"]["ChatCompletionRequest"]["properties"]["reasoning_effort"]
    assert set(effort["enum"]) >= {"none", "minimal", "low", "medium", "high"}
    assert "low: 512 tokens" in effort["description"]
