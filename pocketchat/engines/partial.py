"""What a stream holds back: the end of the text that may be the start of a marker.

A marker (`<think>`, `</think>`, `<tool_call>`, a client's stop sequence) may arrive split
over deltas (`"<thi"`, `"nk>"`). Whoever scans a stream for markers releases everything but
`partial_suffix(text, markers)` characters at once, and holds those until the next delta (or
the end) says whether a marker begins there: text is never delayed by more than one marker's
length. The thinking split, the tool-call parser and the server's stop sequences use it.
"""

from __future__ import annotations

from typing import Iterable


def partial_suffix(text: str, markers: Iterable[str]) -> int:
    """Length of the longest end of `text` that is the start (a proper prefix) of one of
    `markers`; 0 when no marker can begin in it."""
    markers = [m for m in markers if m]
    longest = min(len(text), max((len(m) for m in markers), default=1) - 1)
    for n in range(longest, 0, -1):
        tail = text[-n:]
        if any(len(m) > n and m.startswith(tail) for m in markers):
            return n
    return 0
