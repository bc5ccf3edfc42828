"""The chat's attachments: files attached to the message being written (Ctrl+O, the palette,
or a pasted path), read ahead while the question is typed, and handed to the message on Enter.

`Attachments` belongs to a `Chat`. Attaching reads the file into an `Attachment` (in a thread;
a refusal is one line in the chat, and the input keeps what was typed), shows its chip and
starts a `ReadAhead` once no answer streams. The chips and the status bar follow the reading;
Esc stops it, and removing a chip starts it again for the files left. Enter takes the files
(`take`): a read-ahead that ends within a couple of seconds finishes first, a longer one stops
where it is (the answer reads the rest); either way the answer waits for it to end, since the
engine takes one request at a time. Before Enter, a line under the chips says when the files
and the chat will not fit the context (older turns left out, or passages retrieved).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, Sequence

from pocketchat.documents import read_path
from pocketchat.documents.attachment import Attachment
from pocketchat.engines.answer.context import reply_reserve
from pocketchat.errors import DocumentRefused
from pocketchat.textsafe import one_line
from pocketchat.ui.chips import Chip, ChipBar, Pending, chip_line
from pocketchat.ui.enginewatch import ENGINE_WAIT
from pocketchat.ui.format import prompt_progress_line
from pocketchat.ui.pastedpath import typed_path
from pocketchat.ui.readahead import ReadAhead
from pocketchat.ui.screens import AttachScreen, ConfirmScreen

Chat = Any  # ui/chat.py's Chat (which imports this module, and takes AttachHandlers)
TICK = 0.25  # how often the chips and the status bar follow a read-ahead
MEASURED = 64  # prompt tokens an answer must have read for its rate to say this machine's


class Attachments:
    """The files attached to the message being written, and their reading ahead."""

    def __init__(self, chat: Chat) -> None:
        self.chat = chat
        self.pending: list[Pending] = []
        self.reading: ReadAhead | None = None  # the read-ahead of `pending`, while it counts
        self.last: ReadAhead | None = None  # the latest one started: the engine's, until done
        self.handed: ReadAhead | None = None  # the one the message sent waits for
        self.typed = ""  # the last path typed that was refused (the dialog offers it again)
        self._rate = 0.0  # prompt tok/s measured in this session
        self._read: tuple[tuple[Attachment, ...], int] | None = None  # last read: files, tokens
        self._timer: Any = None

    # -- what is attached -------------------------------------------------------------------
    @property
    def files(self) -> tuple[Attachment, ...]:
        return tuple(p.attachment for p in self.pending)

    @property
    def rate(self) -> float:
        """Prompt tokens a second on this machine: measured here, else a saved answer's."""
        if self._rate > 0:
            return self._rate
        for message in reversed(self.chat.conversation.messages):
            stats = message.stats or {}
            if message.role == "assistant" and (stats.get("prompt_tokens") or 0) >= MEASURED:
                return float(stats.get("prompt_tok_s") or 0.0)
        return 0.0

    def note_answer(self, stats: dict | None) -> None:
        """An answer's figures: its prompt rate, when it read enough to say it."""
        if stats and (stats.get("prompt_tokens") or 0) >= MEASURED and stats.get("prompt_tok_s"):
            self._rate = float(stats["prompt_tok_s"])

    def ask(self) -> None:
        """Ctrl+O and the palette: a dialog asks for the path (not over another dialog)."""
        app = self.chat.app
        if app.screen is not app.screen_stack[0]:
            return

        async def chosen(typed: str | None) -> None:
            if typed:
                await self.attach([typed_path(typed)])

        app.push_screen(AttachScreen(self.typed), callback=chosen)

    def offer(self, text: str, paths: Sequence[Path]) -> None:
        """A paste that is only files' paths: attach them? No pastes the text after all."""
        names = ", ".join(p.name for p in paths)
        prompt = self.chat.query_one("#prompt")

        async def answered(yes: bool | None) -> None:
            if yes:
                await self.attach(paths)
            else:
                prompt.paste_text(text)

        question = f"Attach {names}?\n(No pastes the path as text.)"
        self.chat.app.push_screen(ConfirmScreen(question), callback=answered)

    async def attach(self, paths: Sequence[Path]) -> int:
        """Read `paths` into chips (a refusal is one line in the chat); the files attached."""
        added = 0
        for path in paths:
            try:
                attachment = await asyncio.to_thread(read_path, path)
            except DocumentRefused as exc:
                self.typed = str(path)
                self.chat.notice(exc.message, kind="warning")
                continue
            except Exception as exc:  # noqa: BLE001 - any file: a line, never a traceback
                self.typed = str(path)
                self.chat.notice(f"{path.name}: could not be read ({type(exc).__name__}: {exc})",
                                 kind="warning")
                continue
            if any(p.attachment.sha256 == attachment.sha256 for p in self.pending):
                self.chat.notify(f"{one_line(attachment.name)} is attached already.")
                continue
            self.pending.append(Pending.of(attachment))
            added += 1
        if added:
            self.typed = ""
            self.read()
            await self.changed()
        return added

    async def remove(self, pending: Pending) -> None:
        """Take a chip away; what the files after it in the prompt were read for goes too."""
        if not any(p is pending for p in self.pending):
            return
        at = next(i for i, p in enumerate(self.pending) if p is pending)
        self.pending.pop(at)
        for p in self.pending[at:]:
            if p.state == "read":
                p.state = "new"  # now after another text: read again
        self._stop_reading()
        self.read()
        await self.changed()

    async def remove_last(self) -> None:
        if self.pending:
            await self.remove(self.pending[-1])

    async def clear(self) -> None:
        self._stop_reading()
        self.pending = []
        await self.changed()

    # -- reading ahead ---------------------------------------------------------------------
    def read(self) -> None:
        """Start reading the files not read yet, once the engine is free (an answer streaming
        now: when it ends, `Chat._finish` calls this again)."""
        chat = self.chat
        if chat.engine is None or chat.stream is not None or chat.starting:
            return
        unread = [p for p in self.pending if p.state in ("new", "reading")]
        if not unread:
            return
        self._stop_reading()
        waits = [lambda last=self.last: last.wait(ENGINE_WAIT)] if self.last else []
        if chat.last_stream is not None:
            waits.append(lambda s=chat.last_stream: s.wait_settled(ENGINE_WAIT))
        waits.append(lambda restored=chat._restored: restored.wait(ENGINE_WAIT))
        options = dataclasses.replace(chat.base_options, thinking=chat.thinking, read_ahead=True,
                                      thinking_budget=None)
        self.reading = self.last = ReadAhead(chat.engine, chat.conversation.engine_messages(),
                                             self.files, options, waits).start()
        for p in unread:
            p.state = "reading"
        if self._timer is None:
            self._timer = chat.set_interval(TICK, self.tick)

    def _stop_reading(self) -> None:
        reading, self.reading = self.reading, None
        if reading is not None:
            reading.cancel()

    def stop(self) -> bool:
        """Esc: stop the read-ahead (the files are read at Enter); False when none runs."""
        reading = self.reading
        if reading is None or reading.done.is_set():
            return False
        reading.cancel()
        return True

    def resume(self) -> None:
        """A new engine is ready: read the files attached meanwhile."""
        self.read()
        self.chat.call_later(self.changed)

    def restart(self) -> None:
        """Another conversation or a new engine: what was read counts no more."""
        self._stop_reading()
        self._read = None
        for p in self.pending:
            if p.state in ("reading", "read", "stopped"):
                p.state = "new"

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no read-ahead uses the engine (from a thread)."""
        last = self.last
        return last is None or last.wait(timeout)

    def shutdown(self, wait: float = 0.0) -> None:
        self._stop_reading()
        if wait:
            self.wait_idle(wait)

    async def tick(self) -> None:
        reading = self.reading
        if reading is not None and reading.done.is_set():
            await self._finished(reading)
        elif reading is not None:
            await self.changed()
        if self.reading is None and (self.handed is None or self.handed.done.is_set()):
            if self._timer is not None:
                self._timer.stop()
                self._timer = None

    async def _finished(self, reading: ReadAhead) -> None:
        self.reading = None
        stats, chat = reading.stats, self.chat
        mine = [p for p in self.pending if p.state == "reading"]
        if reading.finish == "stop" and stats is not None and stats.retrieval:
            for p in mine:
                p.state = "too long"
        elif reading.finish == "stop" and stats is not None:
            self._counted(reading, mine)
            if stats.prompt_tokens >= MEASURED and stats.prompt_tok_s > 0:
                self._rate = stats.prompt_tok_s
        else:
            for p in mine:
                p.state = "stopped" if reading.finish == "cancelled" else "not read"
            if reading.finish == "error" and chat.engine is not None:
                chat.notice(f"The files were not read ahead ({reading.error or 'unknown error'}); "
                            "Enter reads them with the question.", kind="info")
        await self.changed()

    def _counted(self, reading: ReadAhead, mine: list[Pending]) -> None:
        """The engine's count of the files just read: the prompt's growth since the read
        before them (the chat's context for the first), split by the estimates."""
        before, base = self._read or ((), self.chat.conversation.context_used())
        if reading.attachments[:len(before)] != before:
            base = self.chat.conversation.context_used()
        self._read = (reading.attachments, reading.read_tokens)
        grown = reading.read_tokens - base
        estimated = sum(p.estimate for p in mine) or 1
        for p in mine:
            p.state = "read"
            if grown > 0:
                p.tokens = max(1, round(grown * p.estimate / estimated))

    # -- Enter -------------------------------------------------------------------------------
    def take(self) -> tuple[tuple[Attachment, ...], list[int], ReadAhead | None]:
        """The files for the message being sent, their tokens (the engine's count, else the
        estimate), and the read-ahead its answer waits for: let finish when it ends within a
        couple of seconds, else stopped where it is (the answer reads the rest). The chips go
        (the message shows them)."""
        files, reading, last = self.files, self.reading, self.last
        tokens = [p.size for p in self.pending]
        if reading is not None and not reading.close_to_done():
            reading.cancel()
        self.reading, self.pending, self._read = None, [], None
        self.handed = last if last is not None and not last.done.is_set() else None
        return files, tokens, last

    def waiting_line(self) -> str | None:
        """The status while the message sent waits for its files' read-ahead (None: it does not)."""
        handed = self.handed
        if handed is None or handed.done.is_set():
            return None
        return self.reading_line(handed)

    def reading_line(self, reading: ReadAhead) -> str:
        names = [a.name for a in reading.attachments]
        what = one_line(names[-1]) if len(names) == 1 else f"{len(names)} files"
        p = reading.progress
        if p is None or reading.cancelled and not reading.started:
            return f"Reading {what}"
        return prompt_progress_line(p.done, p.total, p.tok_s, p.seconds_left, what=what)

    # -- what the screen shows ---------------------------------------------------------------
    def fit_note(self) -> str:
        """One line when the chat and the files will not fit the context ("" when they do)."""
        info = self.chat.info
        if not self.pending or info is None or not info.n_ctx:
            return ""
        if any(p.state == "too long" for p in self.pending):
            return ("The files do not fit the context: the passages that best answer your "
                    "question will be read instead.")
        room = info.n_ctx - reply_reserve(info.n_ctx, self.chat.base_options.max_tokens)
        files = sum(p.size for p in self.pending)
        chat = self.chat.conversation.context_used()
        if files > room:
            return (f"The files (~{files:,} tokens) do not fit the context ({room:,} of "
                    f"{info.n_ctx:,} tokens for the prompt): the passages that best answer "
                    "your question will be read instead.")
        if chat + files > room:
            return (f"The chat and the files (~{chat + files:,} tokens) do not fit the context "
                    f"({room:,} tokens for the prompt): its oldest turns will be left out.")
        return ""

    async def changed(self) -> None:
        """The chips, the note, the input's Enter and the status bar after a change."""
        chat = self.chat
        reading = self.reading
        progress = reading.progress if reading is not None else None
        lines = [chip_line(p, self.rate, progress if p.state == "reading" else None)
                 for p in self.pending]
        await chat.query_one(ChipBar).show(self.pending, lines, self.fit_note())
        chat.query_one("#prompt").attached = len(self.pending)
        if chat.stream is not None or chat.starting or chat.engine is None:
            return
        state = self.reading_line(reading) if reading is not None else None
        if state is None:
            shown = chat.query_one("#status").figures.state
            state = "Ready" if shown.startswith("Reading") else shown
        used = chat.conversation.context_used() + sum(p.size for p in self.pending)
        chat.idle_status(state, context_used=used)


class AttachHandlers:
    """The chat's handlers for its attachments (`Chat.files`): a pasted path, Backspace in an
    empty input, a click on a chip."""

    files: Attachments

    def on_prompt_input_paths_pasted(self, event: Any) -> None:  # PromptInput.PathsPasted
        self.files.offer(event.text, event.paths)

    async def on_prompt_input_remove_attachment(self, _event: Any) -> None:
        await self.files.remove_last()

    async def on_chip_remove(self, event: Chip.Remove) -> None:
        await self.files.remove(event.pending)
