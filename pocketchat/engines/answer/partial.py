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
    `markers`; 0 when no marker can begin in it. Per delta: a `find` per marker, no copies."""
    best = 0
    for m in markers:
        if len(m) < 2:
            continue
        i = text.find(m[0], max(0, len(text) - len(m) + 1))  # the leftmost start is the longest
        while i >= 0:
            if m.startswith(text[i:]):
                best = max(best, len(text) - i)
                break
            i = text.find(m[0], i + 1)
    return best
