"""What every chat front end does the same way around a tool call: the tools offered to the
model (none on the last step, which must answer), and what goes back to it as the tool's turn
(its result, or that the user refused the call).

`settle(...)` decides one call, asks the user through the front end's `ask` (the terminal
chat's dialog, the web chat's page) and runs it; the loop around it belongs to each front end,
bounded by MAX_STEPS answers a message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Awaitable, Callable, Sequence

from pocketchat.engines.types import ChatOptions, ToolCall
from pocketchat.tools.permissions import Permissions
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


# The front end's question: told whether this call asks (so it can show the call either way),
# it returns the user's choice ("once", "always", "never", "deny", or "stop": deny and end the
# loop) when it asks, else None.
Ask = Callable[[bool], Awaitable["str | None"]]


@dataclass(frozen=True)
class Outcome:
    """What one call came to: the tool's turn for the model, and what the user chose."""

    text: str
    ok: bool
    note: str = ""
    choice: str | None = None  # the user's answer, when the call asked
    ran: bool = False


async def settle(call: ToolCall, tool: Tool | None, permissions: Permissions,
                 servers: ToolServers | None, ask: Ask, *, stopped: bool = False) -> Outcome:
    """One call: decided (`permissions`; refused once the loop was `stopped`), asked when it
    must be, run in a thread, or refused with the model told."""
    decision = "refuse" if tool is None or stopped else permissions.decide(tool)
    choice = await ask(decision == "ask")
    if tool is None:
        return Outcome(UNKNOWN.format(name=call.name), False)
    if decision == "ask":
        choice = choice or "stop"
        if choice != "stop":
            permissions.answer(tool.name, choice)
        decision = "run" if choice in ("once", "always") else "refuse"
    if decision == "refuse" or servers is None:
        return Outcome(DENIED.format(name=call.name), False, choice=choice)
    result = await asyncio.to_thread(servers.call, call.name, call.arguments)
    return Outcome(turn_text(result), result.ok, result.note, choice, ran=True)
