"""The `serve` cases on the live starter server: what the engine cannot honour is
a 400 (never an empty answer or a 500 with a repr); a forced call cut off is no markup;
shutdown is prompt, in the protocol's shape and without a traceback; memory options are
bounded by the machine."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import REPO
from support.serverproc import ServerProcess, running

pytestmark = pytest.mark.slow
HI = [{"role": "user", "content": "Give me JSON."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    with running(["--model", "starter", "--ctx", "1024"], tmp_path_factory.mktemp("serve")) as s:
        yield s


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {
        "$ref": "#"}}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {
        "$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "required": ["next"], "properties": {
            "next": {"$ref": "#/$defs/n"}}}}}}}}, "response_format.json_schema.schema"),
    ({"chat_template_kwargs": {"messages": "x"}}, "chat_template_kwargs.messages"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}]},
     "messages[1]"),
])
def test_what_cannot_be_honoured_is_a_400_naming_it(srv, body, param):
    status, got = srv.post_json("/v1/chat/completions", {"messages": HI, "max_tokens": 16, **body})
    assert status == 400 and got["error"]["param"] == param, got
    assert "object at 0x" not in got["error"]["message"]


def test_a_regex_error_says_what_is_wrong(srv):
    status, got = srv.post_json("/v1/chat/completions", {"messages": HI, "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {
            "type": "string", "pattern": "("}}}})
    assert status == 400 and "unclosed group" in got["error"]["message"], got


def test_json_schema_without_schema_is_json(srv):
    status, got = srv.post_json("/v1/chat/completions", {"messages": HI, "max_tokens": 60,
        "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})
    assert status == 200, got
    choice = got["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict), choice
    else:  # cut off: still the start of an object, never plain text
        assert choice["message"]["content"].lstrip().startswith("{"), choice


def test_a_forced_call_cut_off_is_not_markup_in_content(srv):
    status, got = srv.post_json("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 3,
        "tools": [WEATHER], "tool_choice": "required"})
    assert status == 200, got
    choice = got["choices"][0]
    assert choice["finish_reason"] == "length" and not choice["message"].get("tool_calls")
    assert "<" not in (choice["message"]["content"] or ""), choice


def _started(tmp_path: Path) -> ServerProcess:
    srv = ServerProcess(["--model", "starter", "--ctx", "2048"], tmp_path)
    srv.wait_ready()
    return srv


@pytest.mark.perf
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_while_a_streamed_prompt_is_read_is_prompt_and_in_openais_shape(tmp_path, sig):
    srv = _started(tmp_path)
    try:
        host, port = srv.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/v1/chat/completions", json.dumps({
            "messages": [{"role": "user", "content": "word " * 1500}], "stream": True,
            "max_tokens": 4}), {"Content-Type": "application/json"})
        time.sleep(1.0)  # the prompt is being read (about 1,500 tokens)
        start = time.monotonic()
        srv.proc.send_signal(sig)
        response = conn.getresponse()
        body = response.read().decode()
        srv.proc.wait(10)
        took = time.monotonic() - start
    finally:
        srv.stop()
    assert took < 2.0, (took, srv.log())
    assert response.getheader("content-type").startswith(("application/json", "text/event-stream"))
    payload = body.split("data: ", 1)[-1] if body.startswith("data: ") else body
    assert json.loads(payload.strip())["error"]["code"] == "server_stopping", body
    assert srv.proc.returncode == 0 and "Traceback" not in srv.log(), srv.log()


@pytest.mark.perf
def test_ctrl_c_on_an_idle_server_exits_within_a_second_without_a_traceback(tmp_path):
    srv = _started(tmp_path)
    try:
        for _ in range(2):  # a request answered first, then idle
            assert srv.get("/health")[0] == 200
        start = time.monotonic()
        srv.proc.send_signal(signal.SIGINT)
        srv.proc.wait(10)
        took = time.monotonic() - start
    finally:
        srv.stop()
    assert took < 1.0 and srv.proc.returncode == 0, (took, srv.log())
    assert "Traceback" not in srv.log() and srv.log().rstrip().endswith("stopped"), srv.log()


def test_a_prompt_cache_larger_than_the_machine_is_refused_with_the_figure(tmp_path):
    run = subprocess.run([sys.executable, "-m", "pocketchat", "serve", "--model", "starter",
                          "--prompt-cache-mb", "99999999999", "--port", "0"],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                              "POCKETCHAT_DATA_DIR": str(tmp_path / "d"),
                              "POCKETCHAT_CACHE_DIR": str(tmp_path / "c")})
    assert run.returncode == 1 and "listening" not in run.stderr, run.stderr
    assert "--prompt-cache-mb 99999999999" in run.stderr and "available" in run.stderr
    assert "GB" in run.stderr and "Traceback" not in run.stderr, run.stderr
