"""The text a user message holds for its attachments: each file as a `<document>` block before
the message's own text. The blocks come first so that everything before the question is the
same whatever is asked: the state at their end is what a changed question, a new chat with the
same file, or a restart starts from (the engine checkpoints and parks it there)."""

from __future__ import annotations

from typing import Sequence

from pocketchat.documents.attachment import Attachment

SEPARATOR = "\n\n"  # between the blocks, and between the last block and the question


def _attr(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace("\n", " ")


def block(attachment: Attachment) -> str:
    """One file as the prompt holds it."""
    attrs = f'name="{_attr(attachment.name)}"'
    if attachment.pages:
        attrs += f' pages="{attachment.pages}"'
    if attachment.excerpt:
        attrs += f' excerpt="{_attr(attachment.excerpt)}"'
    return f"<document {attrs}>\n{attachment.text.strip()}\n</document>"


def lead(attachments: Sequence[Attachment]) -> str:
    """What goes before the message's own text ("" without attachments)."""
    if not attachments:
        return ""
    return SEPARATOR.join(block(a) for a in attachments) + SEPARATOR


def with_documents(content: str, attachments: Sequence[Attachment]) -> str:
    """A user message's text with its attachments before it."""
    return lead(attachments) + content
