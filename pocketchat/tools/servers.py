"""The MCP servers a chat uses, behind a synchronous, thread-safe API.

One background thread runs an asyncio loop that holds every session (the `mcp` SDK's
ClientSession over stdio or streamable HTTP); each server is started on first use, once: one
that fails to start or to list its tools leaves a line in `notes` and is skipped. `call` never
raises for a tool's failure (bad arguments, an unknown tool, the tool's error, a crash, a
timeout, a huge result): it returns a ToolResult that says so. A call past its timeout stops
the server; it starts again on the next use. A stdio server's environment is only the SDK's
default one (PATH, HOME, ...) plus its config's `env`; its stderr goes to
`<cache>/mcp-logs/NAME.log`, never to the terminal. `close()` stops every server and the thread.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import threading
import weakref
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Coroutine, Literal, TypeVar

from pocketchat.textsafe import one_line
from pocketchat.tools.config import ServerConfig, ToolConfig
from pocketchat.tools.session import Connection, StartFailed, log_sdk_to
from pocketchat.tools.tool import MAX_RESULT_CHARS, Tool, ToolResult, finished, model_names

__all__ = ["MAX_RESULT_CHARS", "ServerStatus", "Tool", "ToolResult", "ToolServers"]

T = TypeVar("T")
CALL_MARGIN = 30.0  # seconds past a server's timeout that a caller waits for the loop at most


class ServerStatus:
    """One server as `pocketchat tools` shows it."""

    def __init__(self, name: str, state: Literal["on", "disabled", "failed"], note: str,
                 tools: tuple[Tool, ...]) -> None:
        self.name, self.state, self.note, self.tools = name, state, note, tools

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "note": self.note,
                "tools": [{"name": t.name, "tool": t.tool, "safe": t.safe,
                           "description": t.description} for t in self.tools]}


class ToolServers:
    def __init__(self, config: ToolConfig, *, log_dir: Path | None = None) -> None:
        if log_dir is None:
            from pocketchat.paths import settings

            log_dir = settings().cache_dir / "mcp-logs"
        self.config = config
        self.log_dir = log_dir
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._connections: dict[str, Connection] = {}
        self._failed: dict[str, str] = {}  # server -> why it did not start
        self._listed: list[Tool] | None = None
        atexit.register(_close_at_exit, weakref.ref(self))

    # --- the public, synchronous side ---

    def tools(self) -> list[Tool]:
        """Every tool of every enabled server that started (each server started once)."""
        with self._lock:
            if self._closed:
                return []
            if self._listed is None:
                self._listed = self._run(self._start_all(), None)
            return list(self._listed)

    def openai_tools(self) -> tuple[dict, ...]:
        return tuple(t.openai() for t in self.tools())

    def status(self) -> list[ServerStatus]:
        """Each configured server: on (with its tools), disabled, or failed (with why)."""
        tools = self.tools()
        shown = []
        for server in self.config.servers:
            if server.disabled:
                shown.append(ServerStatus(server.name, "disabled", "", ()))
            elif server.name in self._failed:
                shown.append(ServerStatus(server.name, "failed", self._failed[server.name], ()))
            else:
                shown.append(ServerStatus(server.name, "on", "",
                                          tuple(t for t in tools if t.server == server.name)))
        return shown

    def call(self, name: str, arguments: str) -> ToolResult:
        """Run the tool the model calls `name` with its JSON `arguments`; never raises for the
        tool's failure."""
        try:
            args = json.loads(arguments) if arguments and arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return finished(f"The arguments for {name} are not JSON ({exc.msg} at column "
                            f"{exc.colno}); the tool was not run.", ok=False,
                            note="the arguments were not JSON; not run")
        if not isinstance(args, dict):
            return finished(f"The arguments for {name} must be a JSON object; the tool was not "
                            "run.", ok=False, note="the arguments were not an object; not run")
        if self._closed:
            return finished(f"The tools are closed; {name} was not run.", ok=False,
                            note="the tool servers are closed")
        tool = next((t for t in self.tools() if t.name == name), None)
        if tool is None:
            known = ", ".join(t.name for t in self.tools()) or "none"
            return finished(f"There is no tool named {name!r} (the tools are: {known}).",
                            ok=False, note=f"no tool named {name!r}")
        server = self._server(tool.server)
        try:
            return self._run(self._call(server, tool, args), server.timeout * 2 + CALL_MARGIN)
        except Exception as exc:  # the loop itself failed or is gone: still one clear line
            text = f"{tool.name}: the call could not be made: {type(exc).__name__}: {exc}"
            return finished(text, ok=False, note=text)

    def close(self) -> None:
        """Stop every server and the thread; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop_all(), loop).result(timeout=15)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)

    def __enter__(self) -> ToolServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the loop's side ---

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        loop = self._ensure_loop()
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result(timeout=timeout)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._closed:
            raise RuntimeError("the tool servers are closed")
        if self._loop is None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_sdk_to(self.log_dir / "pocketchat-client.log")
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_run_loop, args=(loop,), name="pocketchat-mcp",
                                      daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def _server(self, name: str) -> ServerConfig:
        return next(s for s in self.config.servers if s.name == name)

    async def _start_all(self) -> list[Tool]:
        servers = self.config.enabled
        started = await asyncio.gather(*(self._start(s) for s in servers))
        pairs = [(s, listed) for s, conn in zip(servers, started, strict=True) if conn is not None
                 for listed in conn.tools]
        names = model_names((s.name, t.name) for s, t in pairs)
        return [Tool(name=name, server=s.name, tool=t.name,
                     description=one_line_safe(t.description or ""),
                     parameters=_schema(t.input_schema), safe=s.is_safe(t.name))
                for name, (s, t) in zip(names, pairs, strict=True)]

    async def _start(self, server: ServerConfig) -> Connection | None:
        conn = Connection(server, self.log_dir)
        try:
            await conn.start()
        except StartFailed as exc:
            note = one_line(f"{server.name}: {exc}")
            self._failed[server.name] = note.split(": ", 1)[1]
            self.notes.append(note)
            return None
        self._connections[server.name] = conn
        return conn

    async def _call(self, server: ServerConfig, tool: Tool, args: dict[str, Any]) -> ToolResult:
        conn = self._connections.get(server.name)
        if conn is None or not conn.alive:  # crashed or stopped after a timeout: start again
            if conn is not None:
                await conn.stop()
            conn = Connection(server, self.log_dir)
            try:
                await conn.start()
            except StartFailed as exc:
                why = one_line(str(exc))
                return finished(f"The tool server {server.name} did not start again: {why}",
                                ok=False, note=f"{server.name}: {why}")
            self._connections[server.name] = conn
        return await conn.call(tool, args)

    async def _stop_all(self) -> None:
        """Every server stopped, then whatever still runs on the loop (a call in flight)
        cancelled, so no caller waits on a loop that is gone."""
        await asyncio.gather(*(c.stop() for c in self._connections.values()),
                             return_exceptions=True)
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=5)


def one_line_safe(text: str) -> str:
    """A description as the model and the palette get it: control characters shown, not obeyed."""
    from pocketchat.textsafe import visible

    return visible(text).strip()


def _schema(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    return dict(schema)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def _close_at_exit(ref: weakref.ref[ToolServers]) -> None:
    servers = ref()
    if servers is not None:
        servers.close()
