"""The server's console: pathological bodies over a raw socket are 400s in OpenAI's
shape (never a 500 and a traceback), Ctrl-C during a stream ends it cleanly, and a server on
another loopback address answers at the URL it prints."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from support.serverproc import REPO, ServerProcess
pytestmark = pytest.mark.slow


def raw_request(url: str, method: str, path: str, body: bytes = b"", *,
                headers: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 request written by hand on a socket (Connection: close)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = {"Host": f"{host}:{port}", "Content-Type": "application/json",
            "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    request = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
        s.sendall(request.encode() + b"\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), payload


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(["--model", "starter", "--ctx", "512"], tmp_path_factory.mktemp("serve"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _messages(extra: str) -> bytes:
    return b'{"messages": [{"role": "user", "content": "hi"}], ' + extra.encode() + b"}"


PATHOLOGICAL = {
    "nested 100000 deep": lambda: b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nested objects": lambda: b'{"a": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
    "an integer of 5000 digits": lambda: _messages('"max_tokens": ' + "9" * 5000),
    "an integer of 400 digits": lambda: _messages('"temperature": ' + "9" * 400),
    "a negative integer of 5000 digits": lambda: _messages('"seed": -' + "1" * 5000),
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_a_pathological_body_is_a_400_in_openais_shape(server, name):
    body = PATHOLOGICAL[name]()
    status, payload = raw_request(server.url, "POST", "/v1/chat/completions", body)
    assert status == 400, (name, payload[:300])
    err = json.loads(payload)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_json", err
    assert "Traceback" not in server.log() and "Exception" not in server.log(), server.log()
    # The server goes on answering.
    status, payload = raw_request(server.url, "POST", "/v1/chat/completions",
                                  _messages('"max_tokens": 2'))
    assert status == 200, payload[:300]


def test_an_integer_of_ordinary_length_still_works(server):
    status, payload = raw_request(server.url, "POST", "/v1/chat/completions",
                                  _messages('"max_tokens": 2, "seed": 18446744073709551615'))
    assert status == 200, payload[:300]


def test_another_loopback_address_answers_at_the_url_it_prints(tmp_path):
    srv = ServerProcess(["--model", "starter", "--ctx", "512", "--host", "127.0.0.2"], tmp_path)
    try:
        url = srv.wait_listening()
        assert url.startswith("http://127.0.0.2:")
        status, body = srv.get("/v1/models")
        assert status == 200, body
        assert body["data"][0]["id"] == "SmolLM2-135M-Instruct"
        # Foreign names (DNS rebinding) and other loopback addresses than its own stay refused.
        for host in ("evil.example", "127.0.0.3"):
            status, body = srv.get("/v1/models", headers={"Host": f"{host}:{url.rsplit(':', 1)[1]}"})
            assert status == 403 and body["error"]["code"] == "host_not_allowed", (host, body)
    finally:
        srv.stop()


def _read_until(sock: socket.socket, marker: bytes, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_ctrl_c_during_a_stream_ends_it_and_exits_without_a_traceback(tmp_path):
    """Ctrl-C in a terminal signals the whole foreground group: the server and its worker."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "POCKETCHAT_DATA_DIR": str(tmp_path / "data"), "POCKETCHAT_CACHE_DIR": str(tmp_path / "cache"),
           "FORCE_COLOR": "1"}  # a library that colours whenever it may must still not here
    err_path = tmp_path / "err.log"
    tty_out, tty_in = os.openpty()  # `pocketchat serve 2> err.log` typed in a terminal
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "pocketchat", "serve", "--model", "starter",
                                 "--ctx", "2048", "--port", "0"], stdout=tty_in,
                                stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    os.close(tty_in)
    try:
        deadline = time.monotonic() + 120
        while not re.search(r"ready: .* at http://", err_path.read_text(errors="replace")):
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.1)
        url = re.search(r"at (http://[^\s/]+)/v1", err_path.read_text()).group(1)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        body = json.dumps({"messages": [{"role": "user", "content": "Tell a long story."}],
                           "stream": True, "max_tokens": 1500, "ignore_eos": True}).encode()
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                     + body)
        got = _read_until(sock, b'"content":"', 60)  # the answer is under way
        assert b"200 OK" in got, got
        os.killpg(proc.pid, signal.SIGINT)
        got += _read_until(sock, b"0\r\n\r\n", 30)
        sock.close()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        os.close(tty_out)
    log = err_path.read_text(errors="replace")
    # The stream ended as a stream does: a last event with a finish reason, [DONE], the end chunk.
    assert got.endswith(b"0\r\n\r\n"), got[-300:]
    assert re.search(rb'"finish_reason":"[a-z]+"', got), got[-500:]
    assert b"data: [DONE]" in got
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert "\x1b[" not in log, repr(log)
    assert "stopped" in log.splitlines()[-1], log
