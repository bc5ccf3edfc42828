"""An attachment's text in passages of about `SIZE` characters, each with where it is: the
page (a PDF's `[page N]` lines) or the lines of the file. Passages end at a blank line or a
line's end where they can, and every character of the text is in exactly one passage."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pocketchat.documents.attachment import Attachment

SIZE = 1200  # characters: about 300 tokens, a paragraph or two
PAGE = re.compile(r"^\[page (\d+)\]$")


@dataclass(frozen=True)
class Passage:
    name: str  # the file's
    index: int  # its place in the file, from 0
    text: str
    page: int  # 0 for a file without pages
    first_line: int  # 1-based, in the attachment's text
    last_line: int

    @property
    def where(self) -> str:
        """"page 3", or "lines 10-42"."""
        if self.page:
            return f"page {self.page}"
        if self.first_line == self.last_line:
            return f"line {self.first_line}"
        return f"lines {self.first_line}-{self.last_line}"


def split(attachment: Attachment, size: int = SIZE) -> list[Passage]:
    """The attachment's passages, in order (a page never shares a passage with another)."""
    out: list[Passage] = []
    lines: list[str] = []
    first, page, length = 1, 0, 0

    def flush(last: int) -> None:
        nonlocal lines, length
        text = "\n".join(lines).strip()
        if text:
            out.append(Passage(attachment.name, len(out), text, page, first, last))
        lines, length = [], 0

    for number, line in enumerate(attachment.text.split("\n"), start=1):
        mark = PAGE.match(line)
        if mark:
            flush(number - 1)
            page, first = int(mark.group(1)), number + 1
            continue
        while len(line) > size:  # one very long line (minified JSON, a CSV row)
            if lines:
                flush(number - 1)
                first = number
            lines, length = [line[:size]], size
            flush(number)
            first, line = number, line[size:]
        if length + len(line) > size and lines:
            flush(number - 1)
            first = number
        elif not line.strip() and length >= size // 2:
            flush(number)
            first = number + 1
            continue
        lines.append(line)
        length += len(line) + 1
    flush(len(attachment.text.split("\n")))
    return out
