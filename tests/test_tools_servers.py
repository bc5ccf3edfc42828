"""Real MCP servers behind ToolServers: the test server (tests/support/mcp_server.py, written
with the `mcp` SDK, over stdio) and the real `@modelcontextprotocol/server-filesystem` from npm
(.ci/run installs it into POCKETCHAT_AGENT_CLIS; without node or that install its test skips,
saying why). Listing, calling, each way a tool or a server fails, the environment a server
gets, and `pocketchat tools`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pocketchat.paths import settings
from pocketchat.tools.config import load_config
from pocketchat.tools.servers import MAX_RESULT_CHARS, ToolServers

pytestmark = pytest.mark.slow  # real server processes: the second CI lane

SERVER = Path(__file__).parent / "support" / "mcp_server.py"
FOLDER = Path(os.environ.get("POCKETCHAT_AGENT_CLIS") or Path.home() / ".cache/pocketchat/agent-clis")
FILESYSTEM = FOLDER / "node_modules" / "@modelcontextprotocol" / "server-filesystem"


def config_file(tmp_path: Path, servers: dict) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def test_server(mode: str = "ok", **extra) -> dict:
    return {"command": sys.executable, "args": [str(SERVER), mode], **extra}


test_server.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp")
    config = load_config(config_file(tmp, {"t": test_server(safe=["add"])}))
    with ToolServers(config, log_dir=tmp / "logs") as started:
        yield started


def test_the_test_servers_tools_are_listed_with_their_schemas(servers):
    tools = {t.name: t for t in servers.tools()}
    assert {"add", "echo", "big", "fail", "slow", "escape", "env"} <= set(tools)
    add = tools["add"]
    assert add.server == "t" and add.safe and not tools["echo"].safe
    assert add.parameters["type"] == "object" and set(add.parameters["required"]) == {"a", "b"}
    assert add.summary == "Add two integers."
    spec = next(s for s in servers.openai_tools() if s["function"]["name"] == "add")
    assert spec["type"] == "function" and spec["function"]["parameters"] == add.parameters
    assert servers.notes == []


def test_a_call_returns_the_tools_text(servers):
    result = servers.call("add", '{"a": 2, "b": 40}')
    assert (result.text, result.ok, result.note) == ("42", True, "")
    assert servers.call("echo", json.dumps({"text": "héllo\nworld"})).text == "héllo\nworld"


def test_a_failing_tool_is_a_result_not_an_exception(servers):
    result = servers.call("fail", "{}")
    assert not result.ok and "fail" in result.note and "error" in result.note


def test_bad_arguments_and_unknown_tools_are_results(servers):
    for name, args in (("add", "{not json"), ("add", "[1, 2]"), ("nope", "{}")):
        result = servers.call(name, args)
        assert not result.ok and result.note and result.text
    assert "not JSON" in servers.call("add", "{not json").text
    wrong = servers.call("add", '{"a": "x"}')  # the server's own validation
    assert not wrong.ok and "add" in wrong.note


def test_a_huge_result_is_cut_with_a_note(servers):
    result = servers.call("big", "")
    assert result.ok and len(result.text) == MAX_RESULT_CHARS
    assert "84,000 left out" in result.note


def test_escapes_in_a_result_are_shown_not_obeyed(servers):
    result = servers.call("escape", "{}")
    assert result.ok and "\x1b" not in result.text and "\x07" not in result.text
    assert "red" in result.text and "␛[31m" in result.text and "end" in result.text


def test_a_call_past_its_timeout_stops_the_server_and_the_next_call_starts_it(tmp_path):
    config = load_config(config_file(tmp_path, {"t": test_server(timeout=2)}))
    with ToolServers(config, log_dir=tmp_path / "logs") as servers:
        servers.tools()
        started = time.monotonic()
        result = servers.call("slow", "{}")
        assert time.monotonic() - started < 10
        assert not result.ok and "2 s" in result.note and "stopped" in result.note
        assert servers.call("add", '{"a": 1, "b": 2}').text == "3"


def test_a_server_that_dies_mid_call_is_one_line_then_starts_again(tmp_path):
    config = load_config(config_file(tmp_path, {"t": test_server()}))
    with ToolServers(config, log_dir=tmp_path / "logs") as servers:
        result = servers.call("die", "{}")
        assert not result.ok
        assert "stopped during the call (exit code 3)" in result.note
        assert "dies mid-call" in result.note  # its last stderr line
        assert servers.call("add", '{"a": 1, "b": 2}').text == "3"


def test_servers_that_crash_print_garbage_or_cannot_start_are_notes(tmp_path, capfd):
    config = load_config(config_file(tmp_path, {
        "crash": test_server("crash"), "garbage": test_server("garbage"),
        "missing": {"command": str(tmp_path / "no-such-program")},
        "off": test_server("crash", disabled=True), "t": test_server(),
    }))
    with ToolServers(config) as servers:
        tools = servers.tools()
        notes = list(servers.notes)
        states = {s.name: s.state for s in servers.status()}
    assert {t.server for t in tools} == {"t"}  # the others skipped, the good one listed
    assert len(notes) == 3
    crash = next(n for n in notes if n.startswith("crash: "))
    assert "exited before it answered (exit code 1)" in crash and "crashed at start" in crash
    garbage = next(n for n in notes if n.startswith("garbage: "))
    assert "not MCP" in garbage and "this is not JSON-RPC" in garbage
    missing = next(n for n in notes if n.startswith("missing: "))
    assert "cannot start" in missing and "No such file" in missing
    assert states == {"crash": "failed", "garbage": "failed", "missing": "failed",
                      "off": "disabled", "t": "on"}
    out, err = capfd.readouterr()
    assert "crashed at start" not in out + err and "JSON-RPC" not in out + err  # never the terminal
    log = settings().cache_dir / "mcp-logs" / "crash.log"
    assert "crashed at start" in log.read_text()


def test_a_server_sees_only_the_default_environment_and_its_config(tmp_path, monkeypatch):
    monkeypatch.setenv("POCKETCHAT_TEST_SECRET", "s3cret")
    config = load_config(config_file(tmp_path, {"t": test_server(env={"GIVEN": "by-config"})}))
    with ToolServers(config, log_dir=tmp_path / "logs") as servers:
        def env(name: str) -> str:
            return servers.call("env", json.dumps({"name": name})).text

        assert env("GIVEN") == "by-config"
        assert env("POCKETCHAT_TEST_SECRET") == "<unset>"
        assert env("POCKETCHAT_CACHE_DIR") == "<unset>"
        assert env("PATH") == os.environ["PATH"]


def test_close_stops_the_servers_and_is_idempotent(tmp_path):
    config = load_config(config_file(tmp_path, {"t": test_server()}))
    servers = ToolServers(config, log_dir=tmp_path / "logs")
    assert servers.call("add", '{"a": 1, "b": 1}').text == "2"
    servers.close()
    servers.close()
    assert servers.tools() == []
    closed = servers.call("add", '{"a": 1, "b": 1}')
    assert not closed.ok and "closed" in closed.note


def test_the_real_filesystem_server_reads_a_file(tmp_path):
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the MCP filesystem server cannot run")
    if not (FILESYSTEM / "package.json").exists():
        pytest.skip(f"@modelcontextprotocol/server-filesystem is not installed under {FOLDER} "
                    "(.ci/run installs it with npm)")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("the key is under the mat\n")
    entry = json.loads((FILESYSTEM / "package.json").read_text())["bin"]["mcp-server-filesystem"]
    config = load_config(config_file(tmp_path, {"files": {
        "command": shutil.which("node"), "args": [str(FILESYSTEM / entry), str(shared)],
        "safe": ["read_text_file", "list_directory"]}}))
    with ToolServers(config, log_dir=tmp_path / "logs") as servers:
        tools = {t.name: t for t in servers.tools()}
        assert servers.notes == []
        assert "read_text_file" in tools and tools["read_text_file"].safe
        assert not tools["write_file"].safe
        result = servers.call("read_text_file", json.dumps({"path": str(shared / "notes.txt")}))
        assert result.ok and "the key is under the mat" in result.text
        outside = servers.call("read_text_file", json.dumps({"path": "/etc/passwd"}))
        assert not outside.ok and "root:" not in outside.text


def test_pocketchat_tools_lists_the_servers_and_their_tools(tmp_path):
    path = config_file(tmp_path, {"t": test_server(safe=["add"]), "broken": test_server("crash"),
                                  "off": test_server(disabled=True)})
    command = [sys.executable, "-m", "pocketchat", "tools", "--mcp", str(path)]
    shown = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.split()[:2] == ["t", "on"] for line in lines)
    assert any(line.split()[:3] == ["add", "safe", "Add"] for line in lines)
    assert any(line.split()[:2] == ["echo", "asks"] for line in lines)
    assert any(line.split()[:2] == ["broken", "failed:"] and "exit code 1" in line for line in lines)
    assert any(line.split() == ["off", "disabled"] for line in lines)
    assert "\x1b" not in shown.stdout and "crashed at start" not in shown.stderr
    as_json = subprocess.run(command + ["--json"], capture_output=True, text=True, timeout=120)
    data = json.loads(as_json.stdout)
    by_name = {s["name"]: s for s in data["servers"]}
    assert by_name["t"]["state"] == "on" and by_name["broken"]["state"] == "failed"
    assert {"name": "add", "tool": "add", "safe": True,
            "description": "Add two integers.\n\n        Returns their sum as text."} in by_name["t"]["tools"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_streamable_http_server_by_url(tmp_path):
    import socket

    port = _free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, "no HTTP server"
                time.sleep(0.1)
        config = load_config(config_file(tmp_path, {
            "web": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Test": "1"}},
            "gone": {"url": f"http://127.0.0.1:{_free_port()}/mcp", "timeout": 5}}))
        with ToolServers(config, log_dir=tmp_path / "logs") as servers:
            assert "add" in {t.name for t in servers.tools()}
            assert servers.call("add", '{"a": 20, "b": 22}').text == "42"
            assert len(servers.notes) == 1 and servers.notes[0].startswith("gone: cannot reach")
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_close_during_a_call_ends_the_call_with_a_result(tmp_path):
    import threading

    config = load_config(config_file(tmp_path, {"t": test_server()}))
    servers = ToolServers(config, log_dir=tmp_path / "logs")
    servers.tools()
    results = []
    caller = threading.Thread(target=lambda: results.append(servers.call("slow", "{}")))
    caller.start()
    time.sleep(1)
    started = time.monotonic()
    servers.close()
    caller.join(timeout=20)
    assert not caller.is_alive() and time.monotonic() - started < 15
    assert len(results) == 1 and not results[0].ok and results[0].note
