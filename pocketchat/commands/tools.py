"""`pocketchat tools`: the tool servers (MCP) the chat may use, each started once to list its
tools, then stopped. Everything a server says is shown through textsafe."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from pocketchat.textsafe import one_line


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mcp", metavar="FILE", default=None,
                   help="the tool-server config (an mcpServers JSON file; default: mcp.json in "
                        "pocketchat's config folder)")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from pocketchat.paths import settings
    from pocketchat.tools.config import load_config
    from pocketchat.tools.servers import ToolServers

    config = load_config(Path(args.mcp) if args.mcp else None)
    where = config.path or settings().mcp_config
    with ToolServers(config) as servers:
        shown = servers.status()
    if args.json:
        print(json.dumps({"config": str(config.path) if config.path else None,
                          "servers": [s.to_json() for s in shown]}, indent=1, ensure_ascii=False))
        return 0
    if not shown:
        print(one_line(f"No tool servers configured (put them in {where}; see docs/tools.md)."))
        return 0
    columns = max(60, shutil.get_terminal_size((100, 24)).columns)
    print(one_line(f"Tool servers in {where}:"))
    for server in shown:
        if server.state == "on":
            count = f"{len(server.tools)} tool" + ("" if len(server.tools) == 1 else "s")
            print(one_line(f"  {server.name}  on  ({count})"))
        elif server.state == "disabled":
            print(one_line(f"  {server.name}  disabled"))
        else:
            print(one_line(f"  {server.name}  failed: {server.note}"))
        width = max((len(t.name) for t in server.tools), default=0)
        for tool in server.tools:
            mark = "safe" if tool.safe else "asks"
            line = one_line(f"    {tool.name:<{width}}  {mark}  {tool.summary}".rstrip())
            print(line if len(line) <= columns else line[:columns - 1] + "…")
    print("\n'asks': the chat asks before each call (once, always in this chat, or never); "
          "'safe' in the config runs a tool without asking.")
    return 0
