"""The RPC client's own checks, against real sockets on 127.0.0.1 (no llama.cpp needed): the
pooled engine decorator names a helper that went away, and a helper that is not one says so."""

from __future__ import annotations

import contextlib
import http.server
import socket
import struct
import threading

import pytest

from support.scripted_engine import Reply, ScriptedEngine
from pocketchat import cli
from pocketchat.engines.worker.pooled import PooledEngine, open_pooled
from pocketchat.engines.types import Message
from pocketchat.errors import EngineCrashed, HelperGone, HelperUnreachable
from pocketchat.rpc import ggml, wire


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_pooled_decorator_names_the_helper_that_went_away():
    gone = f"127.0.0.1:{free_port()}"  # nothing listens there any more
    inner = ScriptedEngine([Reply("one two three four five", crash_after=2)])
    engine = PooledEngine(inner, [gone])
    seen = []
    with pytest.raises(HelperGone) as err:
        for chunk in engine.chat([Message("user", "Hi")]):
            seen.append(chunk.text)
    assert seen == ["one", " two"]  # what came before the crash came through
    assert err.value.endpoint == gone and f"the helper at {gone} went away" in err.value.message
    assert engine.gone == gone  # the chat's Ctrl+R reloads without it
    assert isinstance(err.value.__cause__, EngineCrashed) and err.value.exitcode == -9
    assert engine.info is inner.info
    engine.close()
    assert inner.closed


def test_an_unreachable_helper_stops_the_pooled_engine_before_it_loads():
    gone = f"127.0.0.1:{free_port()}"
    opened = []
    with pytest.raises(HelperUnreachable) as err:
        open_pooled([gone], lambda: opened.append(1) or ScriptedEngine())
    assert opened == [] and err.value.endpoint == gone
    assert "nothing listens there" in err.value.message


# -- a helper that is not an RPC server says so ------------------------------------------------


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up after the answer; its traceback would land in the test's stderr


@contextlib.contextmanager
def http_server():
    """A plain HTTP server on 127.0.0.1 (Python's own): it waits for a request line."""
    srv = _QuietServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@contextlib.contextmanager
def tcp_server(on_client):
    """A TCP listener on 127.0.0.1 that hands each connection to `on_client(conn)`."""
    lsock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            with conn:
                on_client(conn)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{lsock.getsockname()[1]}"
    finally:
        stop.set()
        lsock.close()


def banner(conn: socket.socket) -> None:  # speaks first, as SSH or SMTP do
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
    conn.recv(1024)


def hang_up(conn: socket.socket) -> None:  # closes without a word
    pass


@pytest.mark.parametrize("kind", ["http", "banner", "hang-up"])
def test_a_server_that_speaks_something_else_is_not_taken_for_a_busy_helper(kind):
    with (http_server() if kind == "http" else tcp_server(banner if kind == "banner" else hang_up)) as ep:
        with pytest.raises(HelperUnreachable) as err:
            wire.probe_helper(ep, timeout=1.0)
    message = err.value.message
    assert f"the helper at {ep} is not a pocketchat/llama.cpp RPC server" in message, message
    assert "another pocketchat" not in message
    assert err.value.endpoint == ep and "pocketchat rpc-server" in err.value.hint


def test_a_helper_busy_with_another_client_is_still_said_to_be_busy():
    with socket.create_server(("127.0.0.1", 0), backlog=4) as lsock:  # never accepts, as a busy rpc-server
        ep = f"127.0.0.1:{lsock.getsockname()[1]}"
        with pytest.raises(HelperUnreachable) as err:
            wire.probe_helper(ep, timeout=0.5)
    assert "is another pocketchat using it?" in err.value.message
    assert "is not a pocketchat" not in err.value.message


@pytest.mark.skipif(ggml.rpc_library() is None, reason="llama-cpp-python built without RPC")
@pytest.mark.slow
def test_rpc_pointed_at_a_web_server_says_it_is_not_an_rpc_server(capsys):
    with http_server() as ep:
        assert cli.main(["--recommend", "--rpc", ep]) == 1
    err = capsys.readouterr().err
    assert f"error: the helper at {ep} is not a pocketchat/llama.cpp RPC server (it answers HTTP)" in err
    assert "another pocketchat" not in err and "Traceback" not in err
    assert "pocketchat rpc-server" in err  # the hint: what to run on the helper


def test_an_older_rpc_server_is_told_apart_by_its_version():
    def old_server(conn: socket.socket) -> None:  # protocol 3.x: HELLO answers major, minor, patch
        conn.recv(64)
        conn.sendall(struct.pack("<Q", 3) + bytes([3, 0, 0]))
        conn.recv(64)

    with tcp_server(old_server) as ep:
        with pytest.raises(HelperUnreachable) as err:
            wire.probe_helper(ep, timeout=1.0)
    assert f"the helper at {ep} speaks RPC protocol 3.0.0; this llama.cpp speaks 7.x" in err.value.message
    assert "same pocketchat and llama-cpp-python version" in err.value.hint
