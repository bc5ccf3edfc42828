"""What the Messages and Responses adapters share when they build the request model's
conversation: the system text in one turn at the start, and tool results that answer the
calls of the assistant turn before them."""

from __future__ import annotations

import json
from typing import Callable, Sequence

from pocketchat.engines.types import Message
from pocketchat.server.protocols.validate import bad


def with_system(system: Sequence[str], messages: Sequence[Message]) -> tuple[Message, ...]:
    """One system turn at the start holding every system text, in order (chat templates
    refuse a system turn anywhere else; agents send more than one), then the rest."""
    texts = [t for t in system if t]
    texts += [m.content for m in messages if m.role == "system" and m.content]
    rest = tuple(m for m in messages if m.role != "system")
    return ((Message("system", "\n\n".join(texts)),) if texts else ()) + rest


def check_results(messages: Sequence[Message], where: Callable[[int], str],
                  result_word: str, call_word: str) -> None:
    """Each tool result answers a call of the assistant turn just before it (only other
    results between), and the conversation does not end with calls that have no results.
    `where(i)` names message i on the wire; the words name the protocol's blocks."""
    open_calls: set[str] | None = None
    for i, m in enumerate(messages):
        if m.role == "tool":
            if open_calls is None:
                raise bad(f"{where(i)} is a {result_word} with no {call_word} before it: it must "
                          f"follow the assistant turn whose {call_word} it answers", where(i),
                          "invalid_value")
            if m.tool_call_id not in open_calls:
                raise bad(f"{where(i)} answers {json.dumps(m.tool_call_id)}, which is none of the "
                          f"{call_word}s before it ({', '.join(sorted(open_calls)) or 'none'})",
                          where(i), "invalid_value")
            continue
        open_calls = {c.id for c in m.tool_calls} if m.role == "assistant" and m.tool_calls else None
    if messages and messages[-1].role == "assistant" and messages[-1].tool_calls:
        raise bad(f"the conversation ends with the assistant's {call_word}: send their results "
                  "before asking for the next answer", where(len(messages) - 1), "invalid_value")
