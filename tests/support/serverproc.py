"""Start the real `pocketchat serve` in a child process on 127.0.0.1 (a free port) and stop it.

`server`, `client` and `model` are module-scoped fixtures of a starter server (1,024-token
context) and the real `openai` client on it; a test module imports them to get its own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from support import REPO


class ServerProcess:
    """`pocketchat serve ARGS --port 0`; `url` is its base (http://127.0.0.1:PORT)."""

    def __init__(self, args: list[str], home: Path, *, env: dict[str, str] | None = None) -> None:
        self.log_path = home / "serve.log"
        full_env = {**os.environ, **(env or {})}
        full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), full_env.get("PYTHONPATH", "")])
        for var, sub in [("POCKETCHAT_DATA_DIR", "data"), ("POCKETCHAT_CACHE_DIR", "cache")]:
            full_env.setdefault(var, str(home / sub))
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pocketchat", "serve", "--port", "0", *args],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
        )
        self.url = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_listening(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"listening on (http://[^\s/]+)/v1", self.log())
            if found:
                self.url = found.group(1)
                return self.url
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {self.log()}")
            time.sleep(0.05)
        raise TimeoutError(f"the server did not start: {self.log()}")

    def wait_ready(self, timeout: float = 90) -> dict:
        if not self.url:
            self.wait_listening(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self.get("/health")
            if body.get("status") == "ready":
                return body
            if body.get("status") == "error" or self.proc.poll() is not None:
                raise RuntimeError(f"the model did not load: {body} {self.log()}")
            time.sleep(0.1)
        raise TimeoutError(f"the model did not load in {timeout} s: {self.log()}")

    def health_until(self, ok, timeout: float = 30) -> dict:
        """/health's body once `ok(body)` holds, or the last one after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            _, body = self.get("/health")
            if ok(body) or time.monotonic() > deadline:
                return body
            time.sleep(0.05)

    def disk_after(self, key: str, at_least: int, timeout: float = 60) -> dict:
        """/health's disk-tier figures once `key` counts `at_least` (asked after each answer)."""
        body = self.health_until(
            lambda b: b.get("cache", {}).get("disk", {}).get(key, 0) >= at_least, timeout)
        return body.get("cache", {}).get("disk", {})

    def get(self, path: str, headers: dict | None = None, timeout: float = 10) -> tuple[int, dict]:
        return self.request("GET", path, None, headers, timeout)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 120) -> tuple[int, dict]:
        """(status, JSON body) of a raw HTTP request, errors included."""
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:
                return err.code, {"raw": raw.decode(errors="replace")}

    def post_json(self, path: str, payload, headers: dict | None = None) -> tuple[int, dict]:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return self.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()

    def openai(self, api_key: str = "unused", timeout: float = 300, **kw: Any) -> Any:
        """The real `openai` client pointed at this server (no retries: a failure shows)."""
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0,
                             timeout=timeout, **kw)


@contextmanager
def running(args: list[str], home: Path, **kw: Any) -> Iterator[ServerProcess]:
    """`pocketchat serve ARGS` started, ready, and stopped after the block."""
    srv = ServerProcess(args, home, **kw)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: Any) -> Iterator[ServerProcess]:
    """The starter served for one test module."""
    with running(["--model", "starter", "--ctx", "1024"], tmp_path_factory.mktemp("serve")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Any:
    return server.openai()


@pytest.fixture(scope="module")
def model(client: Any) -> str:
    """The model name the server answers to."""
    return client.models.list().data[0].id
