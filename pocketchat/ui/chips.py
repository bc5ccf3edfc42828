"""The files attached to the message being written, as chips above the input: each file's
name, its size in tokens and where its reading stands; a click on a chip removes it.

Only a file's name reaches the screen, with its control characters shown as pictures
(`textsafe.one_line`), never its text. `ChipBar` is hidden while nothing is attached.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from pocketchat.documents.attachment import Attachment
from pocketchat.documents.prompt import block
from pocketchat.engines.types import PromptProgress
from pocketchat.textsafe import one_line
from pocketchat.ui.format import compact_count, human_duration

CHARS_PER_TOKEN = 4  # the estimate until the engine has counted a file
MARK = "❐"
REMOVE = "✕"
# Where a file's reading stands: attached ("new"), being read ahead, read (the engine holds
# it), stopped (Esc: Enter reads it), too long to read ahead (passages are chosen at Enter),
# not read (the read-ahead failed: Enter reads it).
STATES = ("new", "reading", "read", "stopped", "too long", "not read")


def estimate(attachment: Attachment) -> int:
    """The tokens a file takes in the prompt, estimated from its text (chars / 4)."""
    return max(1, len(block(attachment)) // CHARS_PER_TOKEN)


@dataclass
class Pending:
    """A file attached to the message being written."""

    attachment: Attachment
    estimate: int
    tokens: int | None = None  # the engine's count, once it read the file
    state: str = "new"

    @classmethod
    def of(cls, attachment: Attachment) -> Pending:
        return cls(attachment, estimate(attachment))

    @property
    def size(self) -> int:
        """Tokens: the engine's count, else the estimate."""
        return self.tokens if self.tokens is not None else self.estimate


def tokens_text(p: Pending) -> str:
    if p.tokens is not None:
        return f"{p.tokens:,} tokens"
    return f"~{compact_count(p.estimate)} tokens"


def state_text(p: Pending, rate: float, progress: PromptProgress | None) -> str:
    """Where the file's reading stands: 'read', 'reading 42% · 3.1 s left', '~4.2 s to read'
    at `rate` (prompt tokens a second measured on this machine), 'reading…' with no rate."""
    if p.state == "read":
        return "read"
    if p.state == "stopped":
        return "not read yet: Enter reads it"
    if p.state == "too long":
        return "too long for the context: passages are chosen at Enter"
    if p.state == "not read":
        return "not read ahead: Enter reads it"
    if p.state == "reading" and progress is not None and progress.total:
        share = f"reading {100 * progress.done // progress.total}%"
        left = progress.seconds_left
        return f"{share} · {human_duration(left)} left" if left is not None else share
    if rate > 0:
        return f"~{human_duration(p.size / rate)} to read"
    return "reading…"


def chip_line(p: Pending, rate: float = 0.0, progress: PromptProgress | None = None) -> str:
    """'❐ notes.md · ~1.2k tokens · ~4.2 s to read  ✕' (the name's control characters shown)."""
    parts = [f"{MARK} {one_line(p.attachment.name)}"]
    if p.attachment.pages:
        parts.append(f"{p.attachment.pages} page{'' if p.attachment.pages == 1 else 's'}")
    parts += [tokens_text(p), state_text(p, rate, progress)]
    return " · ".join(parts) + f"  {REMOVE}"


class Chip(Static):
    """One attached file; a click removes it."""

    class Remove(Message):
        def __init__(self, pending: Pending) -> None:
            super().__init__()
            self.pending = pending

    def __init__(self, pending: Pending, line: str) -> None:
        super().__init__(Content(line), markup=False, classes="chip")
        self.pending = pending
        self.tooltip = "Click to remove (Backspace in an empty input removes the last one)"

    def show(self, line: str) -> None:
        if str(self.render()) != line:
            self.update(Content(line))

    def on_click(self) -> None:
        self.post_message(self.Remove(self.pending))


class ChipBar(Vertical):
    """The chips above the input, and one line on what happens when they do not fit."""

    DEFAULT_CSS = """
    ChipBar { height: auto; margin: 0 1; padding: 0 1; display: none; }
    ChipBar.-attached { display: block; }
    ChipBar > .chip { height: 1; width: 1fr; color: $text; }
    ChipBar > .chip:hover { background: $boost; }
    ChipBar > #fit-note { height: auto; color: $warning; display: none; }
    ChipBar > #fit-note.-shown { display: block; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="fit-note", markup=False)

    def lines(self) -> list[str]:
        """The chips' lines, as shown."""
        return [str(chip.render()) for chip in self.query(Chip).results(Chip)]

    @property
    def note(self) -> str:
        return str(self.query_one("#fit-note", Static).render())

    async def show(self, pending: list[Pending], lines: list[str], note: str) -> None:
        """One chip per file in `pending` with its line; `note` under them ("" for none)."""
        chips = list(self.query(Chip).results(Chip))
        if [id(c.pending) for c in chips] != [id(p) for p in pending]:
            await self.remove_children(Chip)
            chips = [Chip(p, line) for p, line in zip(pending, lines, strict=True)]
            if chips:
                await self.mount_all(chips, before="#fit-note")
        for chip, line in zip(chips, lines, strict=True):
            chip.show(line)
        label = self.query_one("#fit-note", Static)
        if str(label.render()) != one_line(note):  # followed 4 times a second: no needless layout
            label.update(Content(one_line(note)))
        label.set_class(bool(note), "-shown")
        self.set_class(bool(pending), "-attached")
