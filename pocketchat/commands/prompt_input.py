"""The question of a one-shot run, from -p, what is piped in, and --file.

`cat notes.md | pocketchat -p "summarise"` uses both, as `llm` and `ollama run` do: the piped
bytes are a document (attached as the file "stdin", read like any file: text or PDF), the -p
text the question about it. Either one alone is the question. `--file PATH` attaches files.
Files are read before the model is loaded, so a refused one costs nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, Sequence, TextIO

from pocketchat.documents import Attachment, from_bytes, read_path

STDIN_NAME = "stdin"


def piped_bytes(stdin: TextIO | BinaryIO | None) -> bytes | None:
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


def piped(stdin: TextIO | None) -> str | None:
    """What `piped_bytes` reads, as text."""
    data = piped_bytes(stdin)
    return None if data is None else data.decode("utf-8", errors="replace")


def asked(instruction: str | None, stdin: TextIO | None, files: Sequence[str | Path] = ()
          ) -> tuple[str, tuple[Attachment, ...]]:
    """(the question, its attachments): with -p, a pipe is a document and -p the question;
    without it, the pipe is the question. DocumentRefused for a file that cannot be read."""
    attachments = [read_path(f) for f in files]
    data = piped_bytes(stdin)
    if instruction is not None and instruction.strip():
        if data is not None and data.strip():
            attachments.insert(0, from_bytes(data, STDIN_NAME))
        return instruction.strip(), tuple(attachments)
    text = data.decode("utf-8", errors="replace") if data is not None else (instruction or "")
    return text.strip(), tuple(attachments)


def _is_tty(stream: TextIO | BinaryIO) -> bool:
    try:
        return bool(stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


def _read(stream: TextIO | BinaryIO) -> bytes | None:
    try:
        raw = getattr(stream, "buffer", None)
        data = raw.read() if raw is not None else stream.read()
    except (OSError, ValueError):  # closed or unreadable
        return None
    return data.encode("utf-8") if isinstance(data, str) else data
