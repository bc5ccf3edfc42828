"""Attachments that do not fit the context: the passages that answer the question, chosen by
BM25 (`rank`) until the room is filled, then put back in each file's order, each after a
`[page N]` or `[lines A-B]` line, so the model can cite where and the user sees the sources.

`choose` is pure: the caller (the engine, which knows the window and the tokenizer) gives the
room in tokens and a token counter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from pocketchat.documents.attachment import Attachment
from pocketchat.documents.passages import Passage, split
from pocketchat.documents.rank import ranked

HEADING_TOKENS = 8  # a passage's `[page N]` line and the blank line after it


@dataclass(frozen=True)
class Retrieval:
    """What a prompt holds of attachments that did not fit whole."""

    sources: tuple[str, ...]  # "report.pdf, page 3", in the files' order
    chosen: int  # passages in the prompt
    passages: int  # passages of the files
    chars_read: int  # characters of the files' text in the prompt
    chars: int  # characters of the files' text

    @property
    def note(self) -> str:
        """One line for the user: that retrieval was used, and how much was read."""
        share = 100 * self.chars_read / self.chars if self.chars else 0
        return (f"the files do not fit the context: {self.chosen} of {self.passages} passages "
                f"({share:.0f}% of the text) were retrieved for the question")


def _places(passages: Sequence[Passage]) -> str:
    """"pages 3, 7, 12" or "lines 1-10, 241-248" (each page once); "none"."""
    if not passages:
        return "none"
    if all(p.page for p in passages):
        pages = list(dict.fromkeys(p.page for p in passages))
        return ("page " if len(pages) == 1 else "pages ") + ", ".join(map(str, pages))
    return ", ".join(p.where for p in passages).replace(", lines ", ", ")


def _heading(p: Passage) -> str:
    return f"[{p.where}]"


def choose(attachments: Sequence[Attachment], question: str, room: int,
           count: Callable[[str], int]) -> tuple[tuple[Attachment, ...], Retrieval]:
    """The attachments holding only the passages that best answer `question` within `room`
    tokens (`count(text)` is a text's tokens), and what was chosen. At least nothing: a room
    too small for one passage gives attachments without text."""
    per = [split(a) for a in attachments]
    flat = [(k, p) for k, ps in enumerate(per) for p in ps]
    order = ranked(question, [p.text for _, p in flat])
    chosen: set[int] = set()
    used = 0
    for i in order:
        need = count(flat[i][1].text) + HEADING_TOKENS
        if used + need > room:
            continue  # a shorter passage further down may still fit
        chosen.add(i)
        used += need
    out: list[Attachment] = []
    sources: list[str] = []
    for k, a in enumerate(attachments):
        mine = [p for i, (owner, p) in enumerate(flat) if owner == k and i in chosen]
        text = "\n\n".join(f"{_heading(p)}\n{p.text}" for p in mine)
        places = _places(mine)
        out.append(a.excerpted(text, f"{len(mine)} of {len(per[k])} passages: {places}"))
        sources += [f"{a.name}, {p.where}" for p in mine]
    chars = sum(len(p.text) for _, p in flat)
    read = sum(len(flat[i][1].text) for i in chosen)
    return tuple(out), Retrieval(tuple(sources), len(chosen), len(flat), read, chars)
