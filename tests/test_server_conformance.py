"""Peers' conformance checks of the OpenAI surface, tried as a client would against the real
`pocketchat serve` on 127.0.0.1 with the starter: the `openai` client and raw HTTP (httpx).

Each check is our own restatement of one in llama.cpp's server tests (tools/server/tests/unit:
test_chat_completion.py, test_completion.py, test_tool_call.py) or mlx-lm's (tests/test_server.py)
that concerns the OpenAI API itself; its name says where it comes from. Checks of a peer's own
endpoints and fields (llama.cpp's /completion, /tokenize, /apply-template, `grammar`,
`json_schema` at the top level, `timings_per_token`, `return_progress`, `n_probs`,
`system_fingerprint` of a llama.cpp build, its error type `exceed_context_size_error`; mlx-lm's
model loading by name, its prompt cache internals) are left out; the README's server section
lists them and why. Every request names the model this server runs (pocketchat, like the peers,
answers any name: agents send their own ids).
"""

from __future__ import annotations

import json

import pytest

from support.serverproc import client, model, server  # noqa: F401 - module fixtures

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow
BOOK = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
CODE = [{"role": "system", "content": "You are a coding assistant."},
        {"role": "user", "content": "Write the fibonacci function in c++."}]
LIFE = "I believe the meaning of life is"
TEST_TOOL = {"type": "function", "function": {
    "name": "test", "description": "",
    "parameters": {"type": "object", "properties": {"success": {"type": "boolean", "const": True}},
                   "required": ["success"]}}}
PYTHON_TOOL = {"type": "function", "function": {
    "name": "python",
    "description": "Runs code in an ipython interpreter and returns the result of the execution.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string",
                                                             "description": "The code to run."}},
                   "required": ["code"]}}}


def post(server, path: str, body: dict) -> tuple[int, dict]:
    r = httpx.post(server.url + path, json=body, timeout=300)
    return r.status_code, r.json()


def events(server, path: str, body: dict) -> list[dict]:
    """A streamed request's events (the JSON ones, before [DONE]); fails on a non-200."""
    out = []
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=300) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        done = False
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            assert not done, "an event after [DONE]"
            out.append(json.loads(line[6:]))
        assert done, "the stream did not end with [DONE]"
    return out


# -- llama.cpp test_chat_completion.py -----------------------------------------------------------


@pytest.mark.parametrize("user", ["What is the best book",
                                  [{"type": "text", "text": "What is"},
                                   {"type": "text", "text": " the best book"}]])
def test_llamacpp_chat_completion(server, model, user):
    status, body = post(server, "/v1/chat/completions", {
        "model": model, "max_tokens": 8,
        "messages": [{"role": "system", "content": "Book"}, {"role": "user", "content": user}]})
    assert status == 200
    assert "cmpl" in body["id"] and body["object"] == "chat.completion"
    assert body["usage"]["prompt_tokens"] > 0 and 0 < body["usage"]["completion_tokens"] <= 8
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    if choice["finish_reason"] == "length":
        assert body["usage"]["completion_tokens"] == 8


def test_llamacpp_chat_completion_stream(server, model):
    whole = post(server, "/v1/chat/completions", {"model": model, "max_tokens": 16,
                                                  "messages": CODE, "temperature": 0})[1]
    evs = events(server, "/v1/chat/completions", {"model": model, "max_tokens": 16, "messages": CODE,
                                                  "temperature": 0,
                                                  "stream_options": {"include_usage": True}})
    content, ids = "", set()
    for i, data in enumerate(evs):
        ids.add(data["id"])
        assert data["model"] == model and data["object"] == "chat.completion.chunk"
        if not data["choices"]:
            assert data["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
            assert data["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]
            continue
        choice = data["choices"][0]
        if i == 0:
            assert choice["delta"]["role"] == "assistant"
        else:
            assert "role" not in choice["delta"]
        if choice["finish_reason"] in ("stop", "length"):
            assert "content" not in choice["delta"]
            assert choice["finish_reason"] == whole["choices"][0]["finish_reason"]
        else:
            assert choice["finish_reason"] is None
            content += choice["delta"].get("content") or ""
    assert len(ids) == 1  # one id for every event of the stream
    assert content == whole["choices"][0]["message"]["content"]
    assert evs[-1]["choices"] == [] and "usage" in evs[-1]


def test_llamacpp_chat_completion_with_openai_library(client, model):
    res = client.chat.completions.create(model=model, messages=CODE, max_tokens=8, seed=42,
                                         temperature=0.8)
    assert res.choices[0].finish_reason == "length"
    assert res.choices[0].message.content is not None


@pytest.mark.parametrize("prefill", ["Whill", [{"type": "text", "text": "Wh"},
                                               {"type": "text", "text": "ill"}]])
def test_llamacpp_assistant_prefill(server, model, prefill):
    status, body = post(server, "/v1/chat/completions", {
        "model": model, "max_tokens": 8, "temperature": 0,
        "messages": [*BOOK, {"role": "assistant", "content": prefill}]})
    assert status == 200
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("response_format,check", [
    ({"type": "json_schema", "json_schema": {"schema": {"const": "foooooo"}}},
     lambda text: text == '"foooooo"'),
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array",
                                                                     "items": {"type": "integer"}}}},
     lambda text: text.lstrip().startswith("[")),  # cut by max_tokens: the start of an array
    ({"type": "json_object"}, lambda text: text.lstrip().startswith(("{", "[", '"')) or text == ""),
])
def test_llamacpp_response_format(server, model, response_format, check):
    status, body = post(server, "/v1/chat/completions", {
        "model": model, "max_tokens": 10, "response_format": response_format,
        "messages": [{"role": "system", "content": "You are a coding assistant."},
                     {"role": "user", "content": "Write an example"}]})
    assert status == 200, body
    assert check(body["choices"][0]["message"]["content"])


@pytest.mark.parametrize("response_format", [
    {"type": "sound"},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": 123}},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": 123}}},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "hiccup"}}},
])
def test_llamacpp_invalid_response_format(server, model, response_format):
    status, body = post(server, "/v1/chat/completions", {
        "model": model, "max_tokens": 4, "response_format": response_format,
        "messages": [{"role": "user", "content": "Write an example"}]})
    assert status == 400 and "error" in body


@pytest.mark.parametrize("messages", [
    None, "string", [123], [{}], [{"role": 123}], [{"role": "system", "content": 123}],
    [{"role": "system", "content": "test"}, {}],
])
def test_llamacpp_invalid_chat_completion_request(server, model, messages):
    status, body = post(server, "/v1/chat/completions", {"model": model, "messages": messages})
    assert status == 400 and "error" in body


def test_llamacpp_logprobs(client, model):
    res = client.chat.completions.create(model=model, temperature=0.0, messages=BOOK, max_tokens=5,
                                         logprobs=True, top_logprobs=10)
    content = res.choices[0].logprobs.content
    assert content is not None
    for token in content:
        assert token.logprob <= 0.0 and token.bytes is not None and len(token.top_logprobs) > 0
    assert "".join(t.token for t in content) == res.choices[0].message.content


def test_llamacpp_logprobs_stream(client, model):
    output, aggregated = "", ""
    for i, data in enumerate(client.chat.completions.create(
            model=model, temperature=0.0, messages=BOOK, max_tokens=5, logprobs=True,
            top_logprobs=10, stream=True)):
        if not data.choices:
            continue
        choice = data.choices[0]
        if i == 0:
            assert choice.delta.role == "assistant"
        else:
            assert choice.delta.role is None
            if choice.finish_reason is None:
                output += choice.delta.content or ""
                assert choice.logprobs is not None and choice.logprobs.content is not None
                for token in choice.logprobs.content:
                    aggregated += token.token
                    assert token.logprob <= 0.0 and token.bytes is not None
                    assert len(token.top_logprobs) > 0
    assert output and aggregated == output


def test_llamacpp_logit_bias(client, model):
    from pocketchat.engines.llamacpp.load import new_llama
    from pocketchat.store.starter import starter_path

    exclude = ["i", "I", "the", "The", "to", "a", "an", "be", "is", "was", "but", "But", "and",
               "And", "so", "So", "you", "You", "he", "He", "she", "She", "we", "We", "they",
               "They", "it", "It", "his", "His", "her", "Her", "book", "Book"]
    vocab = new_llama(starter_path(), n_ctx=64, vocab_only=True)
    tokens = vocab.tokenize((" " + " ".join(exclude) + " ").encode(), add_bos=False)
    res = client.chat.completions.create(model=model, temperature=0.0, messages=BOOK, max_tokens=64,
                                         logit_bias={str(t): -100 for t in tokens})
    text = res.choices[0].message.content
    assert text
    assert all(text.find(" " + word + " ") == -1 for word in exclude)


@pytest.mark.parametrize("stream", [False, True])
def test_llamacpp_context_size_exceeded(server, model, stream):
    body = {"model": model, "messages": BOOK * 200, "stream": stream}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_llamacpp_chat_completions_multiple_choices(server, model):
    status, body = post(server, "/v1/chat/completions", {"model": model, "max_tokens": 8, "n": 2,
                                                         "messages": CODE})
    assert status == 200 and len(body["choices"]) == 2
    assert [c["index"] for c in body["choices"]] == [0, 1]
    for choice in body["choices"]:
        assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
        assert choice["finish_reason"] == "length"


# -- llama.cpp test_completion.py (the OpenAI endpoint /v1/completions) --------------------------


def test_llamacpp_completion_with_openai_library(client, model):
    res = client.completions.create(model=model, prompt=LIFE, max_tokens=8)
    assert res.choices[0].finish_reason == "length"
    assert res.choices[0].text is not None and res.usage.completion_tokens == 8


def test_llamacpp_completion_stream_with_openai_library(client, model):
    text = ""
    for data in client.completions.create(model=model, prompt=LIFE, max_tokens=8, stream=True):
        choice = data.choices[0]
        if choice.finish_reason is None:
            assert choice.text is not None
            text += choice.text
    assert text


def test_llamacpp_completion_stream_with_openai_library_stops(client, model):
    prompt = ("System: You are a helpful assistant.\nAssistant:\nHey! How could I help?\n"
              "User:\nTell me a joke.\nAssistant:\n")
    text = ""
    for data in client.completions.create(model=model, prompt=prompt, stop=["User:\n", "Assistant:\n"],
                                          max_tokens=200, stream=True, temperature=0):
        choice = data.choices[0]
        if choice.finish_reason is None:
            text += choice.text
    assert text and "User:\n" not in text and "Assistant:\n" not in text


def test_llamacpp_consistent_result_same_seed(server, model):
    texts = {post(server, "/v1/completions", {"model": model, "prompt": LIFE, "seed": 42,
                                              "temperature": 0.0})[1]["choices"][0]["text"]
             for _ in range(4)}
    assert len(texts) == 1


def test_llamacpp_different_result_different_seed(server, model):
    texts = [post(server, "/v1/completions", {"model": model, "prompt": LIFE, "seed": seed,
                                              "temperature": 1.0})[1]["choices"][0]["text"]
             for seed in range(4)]
    assert all(a != b for a, b in zip(texts, texts[1:], strict=False))


def test_llamacpp_long_prompt_is_refused(server, model):
    status, body = post(server, "/v1/completions", {"model": model, "prompt": LIFE * 200})
    assert status == 400 and "error" in body


def test_llamacpp_completion_with_tokens_input(client, model):
    from pocketchat.engines.llamacpp.load import new_llama
    from pocketchat.store.starter import starter_path

    vocab = new_llama(starter_path(), n_ctx=64, vocab_only=True)
    tokens = vocab.tokenize(LIFE.encode(), add_bos=True, special=True)
    one = client.completions.create(model=model, prompt=tokens, temperature=0, max_tokens=8)
    text = client.completions.create(model=model, prompt=LIFE, temperature=0, max_tokens=8)
    assert one.choices[0].text == text.choices[0].text
    batch = client.completions.create(model=model, prompt=[tokens, tokens], temperature=0, max_tokens=8)
    assert [c.index for c in batch.choices] == [0, 1]
    assert batch.choices[0].text == batch.choices[1].text == text.choices[0].text
    mixed = client.completions.create(model=model, prompt=[LIFE, LIFE], temperature=0, max_tokens=8)
    assert [c.text for c in mixed.choices] == [text.choices[0].text] * 2


# -- llama.cpp test_tool_call.py ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool,key", [(TEST_TOOL, "success"), (PYTHON_TOOL, "code")])
def test_llamacpp_completion_with_required_tool(client, model, tool, key, stream):
    ask = dict(model=model, max_tokens=256, messages=[
        {"role": "system", "content": "You are a coding assistant."},
        {"role": "user", "content": "Write an example"}], tool_choice="required", tools=[tool],
        parallel_tool_calls=False, temperature=0.0, top_p=1.0, extra_body={"top_k": 1})
    if stream:
        calls: dict[int, dict] = {}
        for ev in client.chat.completions.create(**ask, stream=True):
            for d in (ev.choices[0].delta.tool_calls or []) if ev.choices else []:
                entry = calls.setdefault(d.index, {"name": "", "arguments": ""})
                entry["name"] += d.function.name or ""
                entry["arguments"] += d.function.arguments or ""
        got = list(calls.values())
    else:
        message = client.chat.completions.create(**ask).choices[0].message
        assert message.content in (None, "")
        got = [{"name": c.function.name, "arguments": c.function.arguments}
               for c in message.tool_calls or []]
    assert len(got) == 1 and got[0]["name"] == tool["function"]["name"]
    arguments = json.loads(got[0]["arguments"])
    assert key in arguments
    jsonschema.validate(arguments, tool["function"]["parameters"])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tools,tool_choice", [([], None), ([PYTHON_TOOL], "none")])
def test_llamacpp_completion_without_tool_call(server, model, tools, tool_choice, stream):
    body = {"model": model, "max_tokens": 32, "tools": tools or None, "tool_choice": tool_choice,
            "messages": [{"role": "system", "content": "You are a coding assistant."},
                         {"role": "user", "content": "say hello world with python"}]}
    if stream:
        evs = events(server, "/v1/chat/completions", body)
        assert not any(e["choices"] and e["choices"][0]["delta"].get("tool_calls") for e in evs)
        assert evs[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    else:
        status, data = post(server, "/v1/chat/completions", body)
        assert status == 200 and data["choices"][0]["message"].get("tool_calls") is None


CALCULATE = {"type": "function", "function": {
    "name": "calculate", "description": "A calculator for arithmetic expressions in Python syntax",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}


@pytest.mark.parametrize("stream", [False, True])
def test_llamacpp_calc_result_after_a_tool_result(server, model, stream):
    """The answer after a tool result is content (the value itself needs a larger model)."""
    body = {"model": model, "max_tokens": 32, "tools": [CALCULATE], "tool_choice": "none",
            "messages": [
                {"role": "system", "content": "You are a tools-calling assistant."},
                {"role": "user", "content": "What's the y coordinate of a point on the unit "
                                            "sphere at angle 30 degrees?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_6789", "type": "function", "function": {
                        "name": "calculate", "arguments": '{"expression":"sin(30 * pi / 180)"}'}}]},
                {"role": "tool", "name": "calculate", "content": "0.55644242476",
                 "tool_call_id": "call_6789"}]}
    if stream:
        evs = events(server, "/v1/chat/completions", body)
        content = "".join(e["choices"][0]["delta"].get("content") or "" for e in evs if e["choices"])
        assert not any(e["choices"] and e["choices"][0]["delta"].get("tool_calls") for e in evs)
    else:
        status, data = post(server, "/v1/chat/completions", body)
        assert status == 200
        message = data["choices"][0]["message"]
        assert message.get("tool_calls") is None
        content = message["content"]
    assert content


@pytest.mark.parametrize("stream", [False, True])
def test_llamacpp_thoughts_of_a_model_that_does_not_think(server, model, stream):
    body = {"model": model, "max_tokens": 16,
            "messages": [{"role": "user", "content": "What's the sum of 102 and 7?"}]}
    if stream:
        evs = events(server, "/v1/chat/completions", body)
        deltas = [e["choices"][0]["delta"] for e in evs if e["choices"]]
        assert not any(d.get("tool_calls") or d.get("reasoning_content") for d in deltas)
        assert "".join(d.get("content") or "" for d in deltas)
    else:
        message = post(server, "/v1/chat/completions", body)[1]["choices"][0]["message"]
        assert message.get("tool_calls") is None and message.get("reasoning_content") is None
        assert message["content"]


# -- mlx-lm tests/test_server.py ----------------------------------------------------------------


def test_mlx_handle_completions(server, model):
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0.5,
            "top_p": 0.9, "repetition_penalty": 1.1, "repetition_context_size": 20, "seed": 999,
            "stop": "stop sequence"}
    status, first = post(server, "/v1/completions", body)
    assert status == 200 and "id" in first and first["choices"]
    assert first["choices"][0]["text"] == post(server, "/v1/completions", body)[1]["choices"][0]["text"]


@pytest.mark.parametrize("content", ["Hello!", [{"type": "text", "text": "Hello!"}]])
def test_mlx_handle_chat_completions(server, model, content):
    status, body = post(server, "/v1/chat/completions", {
        "model": model, "max_tokens": 10, "temperature": 0.7, "top_p": 0.85,
        "repetition_penalty": 1.2,
        "messages": [{"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]
                      if isinstance(content, list) else "You are a helpful assistant."},
                     {"role": "user", "content": content}]})
    assert status == 200 and "id" in body and body["choices"] and body["usage"]["completion_tokens"] > 0


def test_mlx_handle_chat_completions_with_null_tool_content(server, model):
    status, body = post(server, "/v1/chat/completions", {
        "model": model, "max_tokens": 10, "messages": [
            {"role": "user", "content": "what is 2+3?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "id": "123",
                 "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
            {"role": "tool", "content": "5", "tool_call_id": "123"}]})
    assert status == 200 and "id" in body and body["choices"]


def test_mlx_handle_models(server):
    r = httpx.get(server.url + "/v1/models", timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list" and isinstance(body["data"], list) and body["data"]
    card = body["data"][0]
    assert "id" in card and card["object"] == "model" and "created" in card


def test_mlx_streaming(server, model):
    evs = events(server, "/v1/chat/completions", {
        "model": model, "max_tokens": 10, "temperature": 0.0,
        "messages": [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "Hello!"}]})
    assert evs
    for data in evs:
        assert len(data["choices"]) == 1 and "delta" in data["choices"][0]


def test_mlx_prompt_cache(server, model):
    system = {"role": "system", "content": "You are a helpful assistant."}
    for user in ("Tell me a story about", "Tell me a story about dragons."):
        status, body = post(server, "/v1/chat/completions", {
            "model": model, "max_tokens": 5, "temperature": 0.0,
            "messages": [system, {"role": "user", "content": user}]})
        assert status == 200 and body["choices"][0]["message"]["content"] is not None
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0

