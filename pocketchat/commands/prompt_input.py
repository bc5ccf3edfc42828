"""The question of a one-shot run, from -p and what is piped in.

`echo TEXT | pocketchat -p "QUESTION"` uses both, as `llm` and `ollama run` do: the piped text
is the document, the -p text the instruction after it. Either one alone is the question.
"""

from __future__ import annotations

import os
import stat
from typing import TextIO


def combine(instruction: str | None, document: str | None) -> str:
    """The prompt: the document, a blank line, then the instruction (stripped; either may be
    missing or blank, then the other is the whole prompt)."""
    parts = [text.strip() for text in (document, instruction) if text and text.strip()]
    return "\n\n".join(parts)


def piped(stdin: TextIO | None) -> str | None:
    """All of stdin when it is a pipe or a file; None for a terminal, a closed or absent stdin
    (nothing is waited for from a keyboard)."""
    if stdin is None:
        return None
    try:
        mode = os.fstat(stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # closed, or not a real file (a test's StringIO)
        return _read(stdin) if not _is_tty(stdin) and hasattr(stdin, "read") else None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    return _read(stdin)


def question(instruction: str | None, stdin: TextIO | None) -> str:
    """What a one-shot run asks: -p TEXT and/or the piped text (see `combine`)."""
    return combine(instruction, piped(stdin))


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


def _read(stream: TextIO) -> str | None:
    try:
        return stream.read()
    except (OSError, ValueError):  # closed or unreadable
        return None
