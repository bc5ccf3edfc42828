"""A tool as the model sees it, a call's result, and the names the model calls tools by.

Invariants: a Tool's `name` is unique among the tools offered, only [A-Za-z0-9_-], at most 64
characters (OpenAI's rule for function names): the tool's own name when no other server has one
that reads the same, else `server_tool`. A ToolResult's text holds no control sequence
(textsafe.visible) and at most MAX_RESULT_CHARS characters; its note says, in one line, what
went wrong or what was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from pocketchat.textsafe import one_line, visible

MAX_RESULT_CHARS = 16_000
MAX_NAME = 64
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Tool:
    name: str  # what the model calls it (unique among those offered)
    server: str  # the config's name of its server
    tool: str  # the server's own name for it
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    safe: bool = False  # runs without asking (the config's "safe")

    def openai(self) -> dict[str, Any]:
        """The tool as ChatOptions.tools takes it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    @property
    def summary(self) -> str:
        """The first line of the description, safe to print on one line."""
        return one_line(self.description.strip().split("\n", 1)[0]) if self.description else ""


@dataclass(frozen=True)
class ToolResult:
    text: str  # what goes back to the model (the result, or what went wrong)
    ok: bool
    note: str = ""  # one line for the chat: a failure, a timeout, a cut


def _clean(name: str) -> str:
    return _NOT_NAME.sub("_", name).strip("_") or "tool"


def model_names(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """The names the model sees for (server, tool) pairs, in order: the tool's own name (cleaned)
    when no other pair's reads the same, else `server_tool`; a clash left after cutting to
    MAX_NAME gets a `_2`, `_3` ... suffix."""
    pairs = list(pairs)
    own = [_clean(tool)[:MAX_NAME] for _, tool in pairs]
    counts: dict[str, int] = {}
    for name in own:
        counts[name] = counts.get(name, 0) + 1
    names: list[str] = []
    taken: set[str] = set()
    for (server, _), name in zip(pairs, own, strict=True):
        if counts[name] > 1:
            name = f"{_clean(server)}_{name}"[:MAX_NAME]
        base, n = name, 2
        while name in taken:
            suffix = f"_{n}"
            name = base[:MAX_NAME - len(suffix)] + suffix
            n += 1
        taken.add(name)
        names.append(name)
    return names


def finished(text: str, *, ok: bool, note: str = "", limit: int = MAX_RESULT_CHARS) -> ToolResult:
    """A result with `text` made safe and cut to `limit` characters (the note then says so)."""
    text = visible(text)
    if len(text) > limit:
        cut = f"the result was cut to its first {limit:,} characters ({len(text) - limit:,} left out)"
        note = f"{note}; {cut}" if note else cut
        text = text[:limit]
    return ToolResult(text=text, ok=ok, note=one_line(note))
