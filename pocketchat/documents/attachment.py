"""One file's text as a conversation holds it (plain data, saved and pickled whole)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence, TypeVar

M = TypeVar("M")  # a message: anything with `role` and `attachments` (engines.types.Message)


@dataclass(frozen=True)
class Attachment:
    """A file read into text. A PDF's text has a `[page N]` line before each page's text, so
    page numbers survive into the prompt and into retrieved passages. `excerpt` is empty for
    the whole file; when retrieval put only some passages in a prompt, `text` is those
    passages and `excerpt` says which (e.g. "6 of 42 passages: pages 3, 7, 12")."""

    name: str  # the file's name, without its folder
    text: str
    sha256: str  # of the file's bytes: the same file is recognised wherever it comes from
    kind: str  # "text", "markdown", "code", "csv", "json", "html" or "pdf"
    size: int  # the file's bytes
    pages: int = 0  # a PDF's pages (0 for a file without pages)
    excerpt: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attachment:
        return cls(name=str(data["name"]), text=str(data["text"]), sha256=str(data.get("sha256", "")),
                   kind=str(data.get("kind", "text")), size=int(data.get("size", 0)),
                   pages=int(data.get("pages", 0)), excerpt=str(data.get("excerpt", "")))

    def excerpted(self, text: str, excerpt: str) -> Attachment:
        """This file with only `text` (chosen passages) in the prompt, `excerpt` saying which."""
        return replace(self, text=text, excerpt=excerpt)


def attach(messages: Sequence[M], attachments: Sequence[Attachment]) -> tuple[M, ...] | None:
    """`messages` with `attachments` added to the last user message's; None without one."""
    for i in range(len(messages) - 1, -1, -1):
        m: Any = messages[i]
        if m.role == "user":
            return (*messages[:i], replace(m, attachments=(*m.attachments, *attachments)),
                    *messages[i + 1:])
    return None
