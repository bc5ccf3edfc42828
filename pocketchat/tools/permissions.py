"""Which tool calls run without asking, per chat: the user's "always" and "never" answers.

Invariant: nothing runs unless the config marks the tool safe or the user said "always" (in
this chat) or "once" (this call); "never" refuses every later call of that tool in this chat,
even a safe one. The answers are saved with the conversation (to_json / from_json), keyed by
the name the model calls the tool by.
"""

from __future__ import annotations

from typing import Any, Literal

from pocketchat.tools.tool import Tool

Decision = Literal["run", "ask", "refuse"]
Choice = Literal["once", "always", "never", "deny"]
CHOICES: tuple[str, ...] = ("once", "always", "never", "deny")


class Permissions:
    def __init__(self, always: set[str] | None = None, never: set[str] | None = None) -> None:
        self.always: set[str] = set(always or ())
        self.never: set[str] = set(never or ())

    def decide(self, tool: Tool) -> Decision:
        if tool.name in self.never:
            return "refuse"
        if tool.safe or tool.name in self.always:
            return "run"
        return "ask"

    def answer(self, tool_name: str, choice: Choice | str) -> Decision:
        """Record the user's answer for this call; returns what to do with it ("run"/"refuse")."""
        if choice not in CHOICES:
            raise ValueError(f"choice must be one of {', '.join(CHOICES)}, not {choice!r}")
        if choice == "always":
            self.always.add(tool_name)
            self.never.discard(tool_name)
        elif choice == "never":
            self.never.add(tool_name)
            self.always.discard(tool_name)
        return "run" if choice in ("once", "always") else "refuse"

    def to_json(self) -> dict[str, list[str]]:
        return {"always": sorted(self.always), "never": sorted(self.never)}

    @classmethod
    def from_json(cls, data: Any) -> Permissions:
        """The answers saved by to_json; anything unreadable counts as no answer (so it asks)."""
        if not isinstance(data, dict):
            return cls()

        def names(key: str) -> set[str]:
            value = data.get(key)
            return {n for n in value if isinstance(n, str)} if isinstance(value, list) else set()

        never = names("never")
        return cls(always=names("always") - never, never=never)
