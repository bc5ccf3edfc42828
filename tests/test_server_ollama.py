"""Ollama's API through the real `ollama` Python client against the real `pocketchat serve` on
127.0.0.1: on the starter (chat and generate, streaming and not, a JSON-schema `format`
validated, list/show/ps/version, every refused endpoint in Ollama's error shape) and on the
tiny `qwen35moe` with POCKET's real Qwen3.6 template (a forced-looking tool round trip: the
model is nonsense, so a `format` schema stands in for the call's validity; `think` on and off)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from support import tinyqwen35
from support.serverproc import running

ollama = pytest.importorskip("ollama")
jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Name a colour."}]
SMALL = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                          "n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["ok", "n"], "additionalProperties": False}
LIGHTS = {"type": "function", "function": {
    "name": "lights", "description": "Switch the lights",
    "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}},
                   "required": ["on"]}}}


@pytest.fixture(scope="module")
def starter(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    with running(["--model", "starter", "--ctx", "2048", "--draft", "off"],
                 tmp_path_factory.mktemp("ollama")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(starter):
    return ollama.Client(host=starter.url, timeout=300)


def test_chat_answers_with_the_engines_figures(client):
    r = client.chat(model="llama3.2", messages=ASK, options={"num_predict": 12, "temperature": 0})
    assert r.done and r.done_reason in ("stop", "length") and r.message.role == "assistant"
    assert r.message.content and r.eval_count and 0 < r.eval_count <= 12
    assert r.prompt_eval_count > 0 and r.eval_duration > 0 and r.total_duration >= r.eval_duration


def test_chat_streams_pieces_that_make_the_answer(client):
    pieces = list(client.chat(model="anything", messages=ASK, stream=True,
                              options={"num_predict": 16, "temperature": 0}))
    assert len(pieces) >= 2 and all(not p.done for p in pieces[:-1]) and pieces[-1].done
    streamed = "".join(p.message.content for p in pieces)
    whole = client.chat(model="anything", messages=ASK, options={"num_predict": 16, "temperature": 0})
    assert streamed == whole.message.content and pieces[-1].eval_count == whole.eval_count


def test_generate_and_its_stream(client):
    r = client.generate(model="m", prompt="The capital of France is", options={"num_predict": 8,
                                                                              "temperature": 0})
    assert r.done and r.response
    pieces = list(client.generate(model="m", prompt="The capital of France is", stream=True,
                                  options={"num_predict": 8, "temperature": 0}))
    assert "".join(p.response for p in pieces) == r.response
    raw = client.generate(model="m", prompt="1, 2, 3,", raw=True, options={"num_predict": 4})
    assert raw.done and raw.eval_count > 0
    loaded = client.generate(model="m", prompt="")  # Ollama's preload call
    assert loaded.done and loaded.done_reason == "load"


def test_a_format_schema_is_enforced(client):
    r = client.chat(model="m", messages=[{"role": "user", "content": "Is it ok? Answer in JSON."}],
                    format=SMALL, options={"num_predict": 200, "temperature": 0})
    jsonschema.validate(json.loads(r.message.content), SMALL)
    r = client.chat(model="m", messages=ASK, format="json", options={"num_predict": 600,
                                                                    "temperature": 0})
    assert r.message.content.lstrip().startswith("{")  # an object, whole unless cut by the cap
    if r.done_reason == "stop":
        assert isinstance(json.loads(r.message.content), dict)


def test_list_show_ps_and_version(client, starter):
    models = client.list().models
    assert len(models) == 1 and models[0].model and models[0].size > 0
    shown = client.show(models[0].model)
    assert "completion" in shown.capabilities and shown.details.format == "gguf"
    running_now = client.ps().models
    assert [m.model for m in running_now] == [models[0].model]
    with urllib.request.urlopen(starter.url + "/api/version", timeout=10) as r:
        assert json.loads(r.read())["version"]
    head = urllib.request.Request(starter.url + "/", method="HEAD")
    with urllib.request.urlopen(head, timeout=10) as r:
        assert r.status == 200


@pytest.mark.parametrize("call", [
    lambda c: c.pull("llama3.2"), lambda c: c.delete("llama3.2"),
    lambda c: c.copy("a", "b"), lambda c: c.embed(model="m", input="hi"),
    lambda c: c.create(model="x", from_="llama3.2"),
], ids=["pull", "delete", "copy", "embed", "create"])
def test_what_pocketchat_does_otherwise_is_an_ollama_error(client, call):
    with pytest.raises(ollama.ResponseError) as err:
        call(client)
    assert err.value.status_code == 501
    assert "pocketchat" in err.value.error and "not offered" in err.value.error


def test_images_and_templates_are_refused_clearly(client):
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="m", messages=[{"role": "user", "content": "What is this?",
                                          "images": ["aGVsbG8="]}])
    assert err.value.status_code == 400 and "cannot read images" in err.value.error
    with pytest.raises(ollama.ResponseError) as err:
        client.generate(model="m", prompt="hi", template="{{ .Prompt }}")
    assert err.value.status_code == 400 and "template" in err.value.error


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    home = tmp_path_factory.mktemp("ollamaq36")
    gguf = tinyqwen35.write_tiny_qwen35moe(home / "q36.gguf",
                                           chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE)
    with running(["--model", str(gguf), "--ctx", "4096", "--draft", "off"], home) as srv:
        yield ollama.Client(host=srv.url, timeout=300)


def test_think_on_and_off_on_pocket_s_architecture(qwen):
    on = qwen.chat(model="m", messages=ASK, think="low", options={"num_predict": 40})
    assert on.message.thinking and on.done
    off = qwen.chat(model="m", messages=ASK, think=False, options={"num_predict": 8})
    assert not off.message.thinking and off.message.content is not None
    shown = qwen.show("m")
    assert "thinking" in shown.capabilities and "tools" in shown.capabilities


def test_a_tool_result_goes_back_to_the_model(qwen):
    """The history of a call and its result is taken and answered (the template renders both)."""
    history = [*ASK, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "lights", "arguments": {"on": True}}}]},
        {"role": "tool", "tool_name": "lights", "content": "the lights are on"}]
    r = qwen.chat(model="m", messages=history, tools=[LIGHTS], think=False,
                  options={"num_predict": 8})
    assert r.done and r.prompt_eval_count > 0
    with pytest.raises(ollama.ResponseError) as err:
        qwen.chat(model="m", messages=[*ASK, {"role": "tool", "tool_name": "lights",
                                              "content": "on"}], think=False)
    assert err.value.status_code == 400 and "no open tool call" in err.value.error


# -- idle: the model's memory given back -------------------------------------------------

SYSTEM = "You answer questions about a bakery's orders in one short line each. " * 8


def _rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0




def test_an_idle_model_is_unloaded_and_the_next_request_loads_it_again(tmp_path):
    """`serve --idle-unload MIN`: the worker ends (its memory freed: the server alone stays,
    well under 300 MB), /health says so, and the next request loads the model again and reads
    only what the disk tier does not hold (the long system prompt read before is cached)."""
    import subprocess

    pytest.importorskip("llama_cpp")
    gguf = tinyqwen35.write_tiny_qwen35moe(tmp_path / "q36.gguf",
                                           chat_template=tinyqwen35.REAL_QWEN36_TEMPLATE)
    args = ["--model", str(gguf), "--ctx", "4096", "--draft", "off", "--idle-unload", "0.03",
            "--prompt-cache-disk-mb", "64", "--parallel", "1"]
    with running(args, tmp_path) as srv:
        client = ollama.Client(host=srv.url, timeout=300)
        ask = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Order 1?"}]
        first = client.chat(model="m", messages=ask, think=False, options={"num_predict": 2})
        assert first.prompt_eval_count > len(SYSTEM)  # read in full
        workers = subprocess.run(["pgrep", "-P", str(srv.pid)], capture_output=True,
                                 text=True).stdout.split()
        assert workers
        idle = srv.health_until(lambda b: b.get("status") == "idle")
        assert idle["status"] == "idle" and idle["model_loaded"] is False and idle["unloads"] == 1
        assert not [w for w in workers if subprocess.run(["kill", "-0", w]).returncode == 0]
        assert _rss_kb(srv.pid) < 300 * 1024, _rss_kb(srv.pid)
        ask[1]["content"] = "Order 2?"
        again = client.chat(model="m", messages=ask, think=False, options={"num_predict": 2})
        assert again.done and again.prompt_eval_count < 64, again.prompt_eval_count
        log = srv.log()
        assert "unloaded after 0.03 min without a request" in log and "loaded again" in log
        # Ollama's own unload call: keep_alive 0
        client.generate(model="m", prompt="", keep_alive=0)
        assert srv.health_until(lambda b: b.get("status") == "idle")["status"] == "idle"
