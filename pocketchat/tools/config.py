"""The tool-server config: mcp.json in pocketchat's config folder, or the file `--mcp` names.

The shape is Claude Desktop's: `{"mcpServers": {NAME: {"command": str, "args": [str],
"env": {str: str}}}}`, or `{NAME: {"url": "http://...", "headers": {str: str}}}` for a
streamable-HTTP server, plus pocketchat's own keys per server: `"safe": true | [tool names]`
(tools that run without asking), `"timeout": seconds` (default 60), `"disabled": true`.
A missing default file is an empty config; a missing `--mcp` file, bad JSON or a wrong shape
is one ToolConfigError that names the file and the spot. Keys other clients keep (Cline's
`autoApprove`, a top-level `globalShortcut`) are ignored; keys of pocketchat's own are checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pocketchat.errors import ToolConfigError

DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class ServerConfig:
    """One tool server: a command to start (stdio) or a URL to reach (streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    safe: bool | frozenset[str] = False  # True: every tool of it; a set: those tools (their own names)
    timeout: float = DEFAULT_TIMEOUT  # seconds for a start and for each call
    disabled: bool = False

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.url else "stdio"

    def is_safe(self, tool: str) -> bool:
        """Whether the tool named `tool` (the server's own name) runs without asking."""
        return self.safe is True or (isinstance(self.safe, frozenset) and tool in self.safe)


@dataclass(frozen=True)
class ToolConfig:
    servers: tuple[ServerConfig, ...] = ()
    path: Path | None = None  # the file read (None: no file)

    @property
    def enabled(self) -> tuple[ServerConfig, ...]:
        return tuple(s for s in self.servers if not s.disabled)


def load_config(path: Path | None = None) -> ToolConfig:
    """The config at `path` (None: `settings().mcp_config`, which may be missing)."""
    explicit = path is not None
    if path is None:
        from pocketchat.paths import settings

        path = settings().mcp_config
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not explicit:
            return ToolConfig(path=None)
        raise ToolConfigError(f"the tool-server config {path} does not exist", path=str(path),
                              hint="Give --mcp a JSON file that exists.") from None
    except IsADirectoryError:
        raise ToolConfigError(f"the tool-server config {path} is a folder, not a file",
                              path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ToolConfigError(f"cannot read the tool-server config {path}: {why}",
                              path=str(path)) from None
    return parse_config(text, path)


def parse_config(text: str, path: Path) -> ToolConfig:
    """The config in `text` (read from `path`, which the errors name)."""
    where = str(path)
    if not text.strip():
        return ToolConfig(path=path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolConfigError(f"{where} is not JSON: {exc.msg} at line {exc.lineno}, column "
                              f"{exc.colno}", path=where) from None
    if not isinstance(data, dict):
        raise ToolConfigError(f"{where}: the top level must be an object with \"mcpServers\", "
                              f"not {_kind(data)}", path=where)
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ToolConfigError(f"{where}: \"mcpServers\" must be an object of servers by name, "
                              f"not {_kind(servers)}", path=where)
    return ToolConfig(servers=tuple(_server(name, entry, where) for name, entry in servers.items()),
                      path=path)


def _server(name: str, entry: Any, where: str) -> ServerConfig:
    at = f"{where}: server {name!r}"

    def bad(what: str) -> ToolConfigError:
        return ToolConfigError(f"{at}: {what}", path=where)

    if not name.strip():
        raise ToolConfigError(f"{where}: a server without a name (\"\")", path=where)
    if not isinstance(entry, dict):
        raise bad(f"must be an object with \"command\" or \"url\", not {_kind(entry)}")
    command, url = entry.get("command"), entry.get("url")
    if command is None and url is None:
        raise bad("has neither \"command\" (a program to start) nor \"url\" (an HTTP server)")
    if command is not None and url is not None:
        raise bad("has both \"command\" and \"url\"; give one")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise bad(f"\"command\" must be a non-empty string, not {_kind(command)}")
    if url is not None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise bad(f"\"url\" must be an http:// or https:// address, not {_shown(url)}")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise bad("\"args\" must be a list of strings")
    env = _strings(entry.get("env", {}), "env", bad)
    headers = _strings(entry.get("headers", {}), "headers", bad)
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise bad(f"\"cwd\" must be a string, not {_kind(cwd)}")
    safe_value = entry.get("safe", False)
    if isinstance(safe_value, bool):
        safe: bool | frozenset[str] = safe_value
    elif isinstance(safe_value, list) and all(isinstance(t, str) for t in safe_value):
        safe = frozenset(safe_value)
    else:
        raise bad("\"safe\" must be true, false or a list of tool names")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise bad(f"\"timeout\" must be a number of seconds above 0, not {_shown(timeout)}")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise bad(f"\"disabled\" must be true or false, not {_shown(disabled)}")
    return ServerConfig(name=name, command=command, args=tuple(args), env=env, cwd=cwd, url=url,
                        headers=headers, safe=safe, timeout=float(timeout), disabled=disabled)


def _strings(value: Any, key: str, bad) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise bad(f"\"{key}\" must be an object of strings (\"NAME\": \"value\")")
    return dict(value)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def _shown(value: Any) -> str:
    return json.dumps(value)[:60]
