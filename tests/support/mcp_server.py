"""A real stdio MCP server for the tool tests, written with the `mcp` SDK's MCPServer.

Run as `python tests/support/mcp_server.py MODE`:
  ok       tools add, echo, big (100,000 characters), fail (raises), slow (sleeps 30 s),
           escape (ANSI and OSC escapes), die (exits mid-call), env (one environment variable
           or "<unset>")
  http     the same tools over streamable HTTP at http://127.0.0.1:PORT/mcp (PORT: argv[2])
  crash    writes a line to stderr and exits 1 before answering
  garbage  prints non-JSON to stdout and exits
"""

from __future__ import annotations

import os
import sys
import time

BIG = 100_000


def serve(port: int | None = None) -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("pocketchat-test")

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers.

        Returns their sum as text."""
        return str(a + b)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text as given."""
        return text

    @server.tool()
    def big() -> str:
        """Return 100,000 characters."""
        return "x" * BIG

    @server.tool()
    def fail() -> str:
        """Always fail."""
        raise RuntimeError("the tool failed on purpose")

    @server.tool()
    def slow() -> str:
        """Sleep for 30 seconds."""
        time.sleep(30)
        return "done"

    @server.tool()
    def escape() -> str:
        """Return text holding terminal escapes."""
        return "red \x1b[31mtext\x1b[0m \x1b]0;pwned title\x07 \x1b[2J end"

    @server.tool()
    def die() -> str:
        """Exit the server in the middle of the call."""
        print("the test server dies mid-call", file=sys.stderr, flush=True)
        os._exit(3)

    @server.tool()
    def env(name: str) -> str:
        """One environment variable of this server, or <unset>."""
        return os.environ.get(name, "<unset>")

    if port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    if mode == "crash":
        print("the test server crashed at start", file=sys.stderr)
        sys.exit(1)
    if mode == "garbage":
        print("this is not JSON-RPC", flush=True)
        print("<html>nor this</html>", flush=True)
        sys.exit(0)
    serve(int(sys.argv[2]) if mode == "http" else None)


if __name__ == "__main__":
    main()
