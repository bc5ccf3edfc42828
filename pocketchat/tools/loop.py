"""What every chat front end does the same way around a tool call: the tools offered to the
model (none on the last step, which must answer), and what goes back to it as the tool's turn
(its result, or that the user refused the call).

The loop itself belongs to each front end (the terminal chat asks in a dialog, the web chat in
the page), bounded by MAX_STEPS answers a message.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from pocketchat.engines.types import ChatOptions
from pocketchat.tools.tool import Tool, ToolResult

if TYPE_CHECKING:
    from pocketchat.tools.servers import ToolServers

MAX_STEPS = 8  # the model's answers to one message when it calls tools
DENIED = "The user did not allow this call of {name}; it was not run."
UNKNOWN = "There is no tool named {name!r}."


def open_servers(path: str | None) -> ToolServers | None:
    """The tool servers of `--mcp FILE` (None: the config folder's mcp.json), or None when it
    names none; each starts when a chat first needs it. A bad file raises ToolConfigError."""
    from pathlib import Path

    from pocketchat.tools.config import load_config
    from pocketchat.tools.servers import ToolServers

    config = load_config(Path(path) if path else None)
    return ToolServers(config) if config.enabled else None


def offered(options: ChatOptions, tools: Sequence[Tool], *, last: bool,
            forced: str | None = None) -> ChatOptions:
    """`options` with `tools` offered: the model chooses (on the last step it may call none),
    or must call `forced` (the user asked for that tool)."""
    if not tools:
        return options
    choice: str | dict = "none" if last else "auto"
    if forced is not None and not last:
        choice = {"type": "function", "function": {"name": forced}}
    return replace(options, tools=tuple(t.openai() for t in tools), tool_choice=choice)


def turn_text(result: ToolResult) -> str:
    """The tool's turn as the model reads it: the result, and its note (cut, failed) after."""
    return result.text if not result.note else f"{result.text}\n[{result.note}]"
