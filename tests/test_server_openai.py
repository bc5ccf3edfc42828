"""The OpenAI surface apps rely on, through the real `openai` client against the real server
on 127.0.0.1 with the starter model: tool calls (stream and not, a result round trip),
JSON-schema and JSON-object output, logprobs, n > 1, the legacy completions endpoint, a
prefill, and CORS (raw HTTP, as a browser sends it). Outputs are checked with `jsonschema`."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from support.serverproc import running
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow
KEY = "s3cret"
APP_ORIGIN = "https://app.example.com"
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"},
                                                   "unit": {"type": "string", "enum": ["C", "F"]}},
                  "required": ["city"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather",
                                            "description": "Current weather in a city",
                                            "parameters": WEATHER_PARAMS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The local time in a city",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running(["--model", "starter", "--ctx", "2048", "--api-key", KEY,
                         "--cors-origin", APP_ORIGIN], tmp_path_factory.mktemp("serve")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> "openai.OpenAI":
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def raw(server, method: str, path: str, headers: dict, body: bytes | None = None
        ) -> tuple[int, dict[str, str], bytes]:
    """A request as a browser sends it: (status, headers lowercased, body)."""
    url = urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def check_call(call, tool: dict) -> dict:
    """A returned tool call: OpenAI's shape, a known function, arguments valid for its schema."""
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == tool["function"]["name"]
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, tool["function"]["parameters"])
    return args


# -- tools ---------------------------------------------------------------------------------------


def test_required_tool_call(client, model):
    r = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                       tool_choice="required", max_tokens=80, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls and not (choice.message.content or "").strip().startswith("<tool_call>")
    for call in choice.message.tool_calls:
        check_call(call, WEATHER)
    assert r.usage.completion_tokens > 0


def test_named_tool_call_streamed_in_pieces(client, model):
    calls: dict[int, dict] = {}
    finish = []
    stream = client.chat.completions.create(
        model=model, messages=ASK, tools=[TIME, WEATHER], max_tokens=80, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    for event in stream:
        for c in event.choices:
            for piece in c.delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += piece.id or ""
                call["name"] += piece.function.name or "" if piece.function else ""
                call["arguments"] += piece.function.arguments or "" if piece.function else ""
            if c.finish_reason:
                finish.append(c.finish_reason)
    assert finish == ["tool_calls"]
    assert sorted(calls) == list(range(len(calls))) and calls
    for call in calls.values():
        assert call["name"] == "get_weather" and call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), WEATHER_PARAMS)


def test_tool_result_round_trip(client, model):
    first = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                           tool_choice="required", max_tokens=80, temperature=0)
    message = first.choices[0].message
    history = [*ASK, message.model_dump(exclude_none=True)]
    history += [{"role": "tool", "tool_call_id": c.id, "content": json.dumps({"temp_c": 18, "sky": "clear"})}
                for c in message.tool_calls]
    second = client.chat.completions.create(model=model, messages=history, tools=[WEATHER],
                                            tool_choice="none", max_tokens=40, temperature=0)
    answer = second.choices[0]
    assert answer.finish_reason in ("stop", "length") and not answer.message.tool_calls
    assert answer.message.content.strip()
    alone = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER],
                                           tool_choice="none", max_tokens=1)
    result_tokens = len(message.tool_calls) * 8  # the result's JSON text alone is more than that
    assert second.usage.prompt_tokens > alone.usage.prompt_tokens + result_tokens  # call and result read


def test_tool_choice_none_never_fails_and_calls_nothing(client, model):
    for stream in (False, True):
        r = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER, TIME],
                                           tool_choice="none", max_tokens=24, stream=stream)
        if stream:
            events = [e for e in r if e.choices]
            assert not any(e.choices[0].delta.tool_calls for e in events)
            assert events[-1].choices[0].finish_reason in ("stop", "length")
        else:
            assert not r.choices[0].message.tool_calls
            assert r.choices[0].finish_reason in ("stop", "length")


# -- structured output ---------------------------------------------------------------------------


def test_json_schema_output_validates(client, model):
    for stream in (False, True):
        r = client.chat.completions.create(
            model=model, max_tokens=120, temperature=0.7, seed=3, stream=stream,
            messages=[{"role": "user", "content": "Invent a person: a name and an age."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
        text = "".join(e.choices[0].delta.content or "" for e in r if e.choices) if stream \
            else r.choices[0].message.content
        jsonschema.validate(json.loads(text), PERSON)


def test_json_object_output_parses(client, model):
    r = client.chat.completions.create(
        model=model, max_tokens=120, temperature=0,
        messages=[{"role": "user", "content": "Give the capital of France as JSON."}],
        response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_a_schema_the_engine_cannot_enforce_is_a_400_naming_it(client, model):
    schema = {"type": "object", "properties": {"a": {"$ref": "https://schemas.example/remote.json"}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=8,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "x", "schema": schema}})
    assert info.value.body["param"].startswith("response_format"), info.value.body


# -- logprobs ------------------------------------------------------------------------------------


def test_logprobs_whole_and_streamed(client, model):
    ask = dict(model=model, messages=[{"role": "user", "content": "Count to five."}], max_tokens=10,
               temperature=0, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    r = client.chat.completions.create(**ask)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 10
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and bytes(t.bytes).decode("utf-8", "replace") == t.token
        assert len(t.top_logprobs) == 3
        assert max(a.logprob for a in t.top_logprobs) >= t.logprob - 1e-4  # greedy: the top one
    streamed = [lp for e in client.chat.completions.create(**ask, stream=True)
                if e.choices and e.choices[0].logprobs for lp in e.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert r.choices[0].logprobs.content[0].top_logprobs[0].logprob == pytest.approx(
        streamed[0].top_logprobs[0].logprob, abs=1e-3)


# -- n > 1 ---------------------------------------------------------------------------------------


def test_n_choices_seeded_seed_plus_one(client, model):
    ask = dict(model=model, messages=[{"role": "user", "content": "Tell me a fact about cats."}],
               max_tokens=12, temperature=1.0, seed=41, extra_body={"ignore_eos": True})
    both = client.chat.completions.create(**ask, n=2)
    assert [c.index for c in both.choices] == [0, 1]
    assert both.usage.completion_tokens == 24
    alone = [client.chat.completions.create(**{**ask, "seed": s}).choices[0].message.content for s in (41, 42)]
    assert [c.message.content for c in both.choices] == alone

    texts: dict[int, str] = {0: "", 1: ""}
    finishes: dict[int, str] = {}
    events = list(client.chat.completions.create(**ask, n=2, stream=True,
                                                 stream_options={"include_usage": True}))
    for e in events:
        for c in e.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert texts == {0: alone[0], 1: alone[1]} and finishes == {0: "length", 1: "length"}
    assert events[-1].usage.completion_tokens == 24


# -- legacy completions --------------------------------------------------------------------------


def test_completions_endpoint(client, model):
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8,
                                  temperature=0)
    assert r.object == "text_completion" and r.choices[0].text.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 3
    pieces = list(client.completions.create(model=model, prompt="The capital of France is",
                                            max_tokens=8, temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in pieces if p.choices) == r.choices[0].text
    echoed = client.completions.create(model=model, prompt="Hello", max_tokens=4, temperature=0,
                                       echo=True, n=2, seed=1)
    assert len(echoed.choices) == 2 and all(c.text.startswith("Hello") for c in echoed.choices)


# -- prefill -------------------------------------------------------------------------------------


def test_a_trailing_assistant_message_is_continued(client, model):
    ask = dict(model=model, max_tokens=12, temperature=0, logprobs=True, extra_body={"ignore_eos": True})
    question = [{"role": "user", "content": "Name three colors."}]
    whole = client.chat.completions.create(messages=question, **ask).choices[0]
    tokens = [t.token for t in whole.logprobs.content]
    head = "".join(tokens[:4])
    rest = client.chat.completions.create(messages=[*question, {"role": "assistant", "content": head}],
                                          **{**ask, "max_tokens": 8}).choices[0]
    assert not rest.message.content.startswith(head)  # the prefill is not repeated
    assert head + rest.message.content == "".join(tokens[:12])  # greedy: the same answer, continued


# -- CORS ----------------------------------------------------------------------------------------


def preflight(origin: str, path: str = "/v1/chat/completions", **extra) -> dict:
    return {"Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os", **extra}


def test_a_browser_preflight_succeeds_without_the_key(server):
    for origin in ("http://localhost:5173", APP_ORIGIN):
        status, headers, _ = raw(server, "OPTIONS", "/v1/chat/completions", preflight(origin))
        assert status == 204, (origin, headers)
        assert headers["access-control-allow-origin"] == origin
        assert "POST" in headers["access-control-allow-methods"]
        allowed = {h.strip() for h in headers["access-control-allow-headers"].lower().split(",")}
        assert {"authorization", "content-type", "x-stainless-os"} <= allowed
        assert int(headers["access-control-max-age"]) > 0


def test_answers_carry_cors_headers_and_refusals_too(server, model):
    body = json.dumps({"model": model, "messages": ASK, "max_tokens": 2}).encode()
    post = {"Origin": APP_ORIGIN, "Content-Type": "application/json"}
    status, headers, data = raw(server, "POST", "/v1/chat/completions",
                                {**post, "Authorization": f"Bearer {KEY}"}, body)
    assert status == 200 and json.loads(data)["choices"]
    assert headers["access-control-allow-origin"] == APP_ORIGIN and "origin" in headers["vary"].lower()
    status, headers, data = raw(server, "POST", "/v1/chat/completions", post, body)  # no key
    assert status == 401 and headers["access-control-allow-origin"] == APP_ORIGIN  # readable
    assert json.loads(data)["error"]["code"] == "invalid_api_key"


def test_other_origins_and_rebinding_are_refused(server):
    status, headers, data = raw(server, "OPTIONS", "/v1/chat/completions", preflight("https://evil.example"))
    assert status == 403 and "access-control-allow-origin" not in headers
    assert json.loads(data)["error"]["code"] == "origin_not_allowed"
    status, headers, _ = raw(server, "GET", "/v1/models",
                             {"Origin": "https://evil.example", "Authorization": f"Bearer {KEY}"})
    assert status == 200 and "access-control-allow-origin" not in headers  # the browser hides it
    # DNS rebinding: the page's own name resolves to 127.0.0.1; Host and Origin are that name.
    status, headers, _ = raw(server, "OPTIONS", "/v1/chat/completions",
                             preflight("http://rebind.example:8080", Host="rebind.example:8080"))
    assert status == 403 and "access-control-allow-origin" not in headers
    status, _, data = raw(server, "OPTIONS", "/v1/chat/completions",
                          preflight("http://localhost:3000", Host="rebind.example:8080"))
    assert status == 403 and json.loads(data)["error"]["code"] == "host_not_allowed"


# -- sampling fields -----------------------------------------------------------------------------


def test_penalties_and_min_p_reach_the_sampler(client, model):
    ask = dict(model=model, messages=[{"role": "user", "content": "Repeat the word cat ten times."}],
               max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    plain = client.chat.completions.create(**ask).choices[0].message.content
    for extra in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0},
                  {"extra_body": {"ignore_eos": True, "repeat_penalty": 3.0}}):
        changed = client.chat.completions.create(**{**ask, **extra}).choices[0].message.content
        assert changed != plain, extra
    # min_p 1.0 keeps only the most likely token: sampling at temperature 1 is then greedy
    greedy = client.chat.completions.create(**{**ask, "temperature": 1.0, "seed": 9, "extra_body": {
        "ignore_eos": True, "min_p": 1.0}}).choices[0].message.content
    assert greedy == plain
