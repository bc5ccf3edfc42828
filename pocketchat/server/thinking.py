"""Thinking on the server: the budgets the protocols' effort levels stand for (one table), the
default for a request that says nothing (`serve --think`), and the answers in flight that a
client may tell to end their thinking now.

    POST /v1/chat/completions/{id}/end_thinking   (also /v1/messages/{id}/..., /v1/responses/{id}/...)

`id` is the one the stream's first event carries (`chatcmpl-...`, `msg_...`, `resp_...`). The
answer's thought is closed at once (`Engine.end_thinking`, as a budget closes it) and the
answer follows on the same stream; 200 `{"id", "object": "end_thinking", "status"}` with
status "ending" (asked of the engine) or "not_thinking" (the answer is past its thought
already: nothing to do), 404 when no answer in flight has that id (done, or never seen).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterator

from pocketchat.engines.types import ChatOptions, Chunk

# reasoning_effort (chat completions), reasoning.effort (Responses) and output_config.effort
# with adaptive thinking (Messages) -> (thinking on, budget in tokens; None: no budget).
EFFORT_BUDGETS: dict[str, tuple[bool, int | None]] = {
    "none": (False, None),
    "minimal": (True, 128),
    "low": (True, 512),
    "medium": (True, 2048),
    "high": (True, 8192),
    "xhigh": (True, None),
    "max": (True, None),  # Anthropic's output_config.effort
}
EFFORTS = tuple(EFFORT_BUDGETS)


def effort_thinking(effort: str) -> tuple[bool, int | None]:
    """(thinking on, budget) of an effort level (already validated)."""
    return EFFORT_BUDGETS[effort]


@dataclass(frozen=True)
class ThinkDefault:
    """What a request that says nothing of thinking gets: `serve --think` (on, and this
    machine's default budget, unless told otherwise)."""

    on: bool = True
    budget: int | None = None

    def describe(self) -> str:
        if not self.on:
            return "thinking off by default"
        if self.budget is None:
            return "thinking on by default, no budget"
        return f"thinking at most {self.budget:,} tokens by default"


class Handle:
    """One answer in flight, as the end-thinking control sees it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.past_thought = False

    def note(self, chunk: Chunk) -> None:
        """What a chunk says: the answer is past its thought once text, a tool call or the
        thought's end has come."""
        if chunk.text or chunk.tool_calls or chunk.stats.thinking_end:
            self.past_thought = True


class ServerThinking:
    """The server's default thinking and its answers in flight, by response id."""

    def __init__(self, default: ThinkDefault | None = None) -> None:
        self.default = default or ThinkDefault()
        self._lock = threading.Lock()
        self._answers: dict[str, Handle] = {}

    def options(self, options: ChatOptions, from_server: str) -> ChatOptions:
        """A request's options with the server's default where it said nothing
        (`ChatRequest.thinking_from_server`: "all", "budget" or "")."""
        d = self.default
        if from_server == "all":
            return replace(options, thinking=d.on, thinking_budget=d.budget if d.on else None)
        if from_server == "budget" and options.thinking and options.thinking_budget is None:
            return replace(options, thinking_budget=d.budget)
        return options

    @contextmanager
    def held(self, key: str | None, answer: Any) -> Iterator[Handle]:
        """`answer` may be told to end its thinking by `key` while this lasts."""
        handle = Handle(answer)
        if key is None:
            yield handle
            return
        with self._lock:
            self._answers[key] = handle
        try:
            yield handle
        finally:
            with self._lock:
                if self._answers.get(key) is handle:
                    del self._answers[key]

    def end(self, key: str) -> str | None:
        """End the thought of the answer `key`: "ending", "not_thinking", or None when no
        answer in flight has that id."""
        with self._lock:
            handle = self._answers.get(key)
        if handle is None:
            return None
        if handle.past_thought:
            return "not_thinking"
        handle.answer.end_thinking()
        return "ending"
