"""One MCP server's connection, on the tool servers' event loop: start, list, call, stop.

A Connection's runner task enters the SDK's transport and ClientSession and stays inside them
until `stop()` (anyio's scopes must be left by the task that entered them); calls are made from
other tasks of the same loop. A start that fails raises StartFailed with one sentence: the
process exited (its exit code, its last stderr line, anything not MCP it printed), it did not
answer within its timeout, it could not be spawned or reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
import time
from pathlib import Path
from typing import Any

import anyio

from pocketchat.tools.config import ServerConfig
from pocketchat.tools.tool import Tool, ToolResult, finished

_spawned: contextvars.ContextVar[list | None] = contextvars.ContextVar("pocketchat_mcp_spawned",
                                                                       default=None)
_FILE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class StartFailed(Exception):
    """A server that did not start or did not list its tools; the message says why."""


def log_sdk_to(path: Path) -> None:
    """The SDK's own log lines (a server's garbage, a failed parse) go to `path`, never to the
    terminal; and the spawned processes are seen, for their exit codes."""
    logger = logging.getLogger("mcp")
    if not any(getattr(h, "_pocketchat", False) for h in logger.handlers):
        handler = logging.FileHandler(path, encoding="utf-8", delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        handler._pocketchat = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    _see_spawned_processes()


def _see_spawned_processes() -> None:
    """Wrap the SDK's spawn so a server's process (for its exit code) is known to the task that
    started it; without that private function the notes only leave the exit code out."""
    import mcp.client.stdio as stdio

    original = getattr(stdio, "_create_platform_compatible_process", None)
    if original is None or getattr(original, "_pocketchat", False):
        return

    async def spawn(*args: Any, **kwargs: Any) -> Any:
        process = await original(*args, **kwargs)
        seen = _spawned.get()
        if seen is not None:
            seen.append(process)
        return process

    spawn._pocketchat = True  # type: ignore[attr-defined]
    stdio._create_platform_compatible_process = spawn


class Connection:
    def __init__(self, server: ServerConfig, log_dir: Path) -> None:
        self.server = server
        self.log_path = log_dir / f"{_FILE_NAME.sub('_', server.name) or 'server'}.log"
        self.session: Any = None
        self.tools: list[Any] = []  # the SDK's Tool objects, as listed
        self.alive = False
        self._ready: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()
        self._runner: asyncio.Task | None = None
        self._process: Any = None
        self._log_start = 0
        self._garbage: str | None = None

    async def start(self) -> None:
        self._ready = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._run())
        try:
            await self._ready
        except StartFailed:
            await self.stop()
            raise
        self.alive = True

    async def stop(self) -> None:
        self.alive = False
        self._stop.set()
        if self._runner is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._runner), 15)

    async def _run(self) -> None:
        assert self._ready is not None
        _spawned.set(seen := [])
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                self._process = seen[0] if seen else None
                from mcp import ClientSession

                self.session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._on_message))
                with anyio.fail_after(self.server.timeout):
                    await self.session.initialize()
                    self.tools = await self._list()
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - the runner ends here, whatever happened
            if not self._ready.done():
                self._ready.set_exception(StartFailed(self._why(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.alive = False

    def _transport(self, stack: contextlib.AsyncExitStack):
        server = self.server
        if server.transport == "http":
            return _http(server)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = stack.enter_context(open(self.log_path, "a", encoding="utf-8", errors="replace"))
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pocketchat starts {server.name}\n")
        log.flush()
        self._log_start = log.tell()
        params = StdioServerParameters(command=server.command or "", args=list(server.args),
                                       env=dict(server.env), cwd=server.cwd)
        return stdio_client(params, errlog=log)

    async def _list(self) -> list[Any]:
        from mcp import types

        tools, cursor = [], None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self.session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception) and self._garbage is None:
            errors = getattr(message, "errors", None)
            line = ""
            with contextlib.suppress(Exception):
                line = str(errors()[0].get("input", "")) if callable(errors) else ""
            self._garbage = line.strip()[:80] or str(message).split("\n", 1)[0][:80]

    async def call(self, tool: Tool, args: dict[str, Any]) -> ToolResult:
        name, timeout = tool.name, self.server.timeout
        try:
            with anyio.fail_after(timeout):
                result = await self.session.call_tool(tool.tool, args)
        except TimeoutError:
            self.alive = False
            asyncio.get_running_loop().create_task(self.stop())
            return finished(f"The tool {name} did not answer within {timeout:g} s; it was stopped.",
                            ok=False, note=f"{name}: no answer within {timeout:g} s; the server "
                                           "was stopped (it starts again on the next call)")
        except Exception as exc:  # noqa: BLE001 - a crash or a protocol error: one line
            if await self._ended(exc):
                self.alive = False
                asyncio.get_running_loop().create_task(self.stop())
                why = "the tool server stopped during the call" + self._exit_text()
            else:
                why = f"the call failed: {_leaf_text(exc)}"
            return finished(f"The tool {name} could not run: {why}.", ok=False,
                            note=f"{name}: {why}")
        text = _content_text(result)
        if result.is_error:
            first = text.strip().split("\n", 1)[0][:200]
            return finished(text or "the tool reported an error", ok=False,
                            note=f"{name} reported an error: {first}" if first else
                            f"{name} reported an error")
        return finished(text, ok=True)

    async def _ended(self, exc: Exception) -> bool:
        """Whether the connection is gone (the process exited, the stream closed), waiting a
        moment for the process's end to be seen."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        closed = isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED
        for _ in range(20):
            if getattr(self._process, "returncode", None) is not None:
                return True
            if not closed and self._process is not None:
                return False
            await asyncio.sleep(0.05)
        return closed

    def _exit_text(self) -> str:
        code = getattr(self._process, "returncode", None)
        text = f" (exit code {code})" if code is not None else ""
        last = self._last_stderr()
        return f"{text}: {last}" if last else text

    def _last_stderr(self) -> str:
        if self.server.transport != "stdio":
            return ""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                f.seek(self._log_start)
                lines = [line.strip() for line in f.read()[-20_000:].splitlines() if line.strip()]
        except OSError:
            return ""
        return lines[-1][:200] if lines else ""

    def _why(self, exc: BaseException) -> str:
        leaves = list(_leaves(exc))
        if any(isinstance(e, TimeoutError) for e in leaves):
            return f"the server did not answer within {self.server.timeout:g} s"
        if self.server.transport == "http":
            return f"cannot reach {self.server.url}: {_leaf_text(exc)}"
        spawn = next((e for e in leaves if isinstance(e, OSError) and self._process is None), None)
        if spawn is not None:
            return f"cannot start {self.server.command!r}: {spawn.strerror or spawn}"
        said = f", after printing something that is not MCP ({self._garbage!r})" if self._garbage else ""
        return f"the server exited before it answered{said}{self._exit_text()}"


@contextlib.asynccontextmanager
async def _http(server: ServerConfig):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=dict(server.headers) or None) as client:
        async with streamable_http_client(server.url or "", http_client=client) as streams:
            yield streams


def _leaves(exc: BaseException):
    inner = getattr(exc, "exceptions", None)  # an exception group (anyio's task groups)
    if isinstance(inner, (list, tuple)) and inner:
        for one in inner:
            yield from _leaves(one)
    else:
        yield exc


def _leaf_text(exc: BaseException) -> str:
    leaf = next(_leaves(exc), exc)
    return f"{type(leaf).__name__}: {leaf}".split("\n", 1)[0][:300]


def _content_text(result: Any) -> str:
    """Text blocks joined; each other kind of block described in one line."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data or "") * 3 // 4
            parts.append(f"[{kind} {block.mime_type}, about {size:,} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.name}: {block.uri}]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            mime = getattr(res, "mime_type", None) or "unknown type"
            if isinstance(text, str):
                parts.append(f"[resource {res.uri} ({mime})]\n{text}")
            else:
                parts.append(f"[resource {res.uri} ({mime}), binary, not shown]")
        else:
            parts.append(f"[{kind or 'unknown'} content, not shown]")
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)
