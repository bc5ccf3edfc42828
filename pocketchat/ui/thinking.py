"""The chat's thinking: the thought's figures as the block's title shows them and a saved
chat keeps them (`ThoughtClock`), Ctrl+T and the palette's "Answer now" (the engine ends the
thought; the answer follows), and the session's thinking budget (the palette's dialog)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from pocketchat.engines.types import Chunk
from pocketchat.select.thinking import Think

Chat = Any  # ui/chat.py's Chat (which imports this module)


class ThoughtClock:
    """An answer's thought: its tokens and how it ended (the engine's counts), and its
    seconds: the engine's decode time while the thought goes on, its share of it once the
    answer begins (the screen's clock when the engine says none)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.seconds: float | None = None
        self.end = ""
        self.over = False
        self._began: float | None = None

    def feed(self, chunk: Chunk, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if chunk.thinking and self._began is None:
            self._began = now
        if self._began is None or self.over:
            return
        s = chunk.stats
        self.tokens = s.thinking_tokens or self.tokens
        self.end = s.thinking_end or self.end
        seconds = s.decode_seconds or (now - self._began)
        self.over = bool(chunk.text or chunk.tool_calls or self.end or chunk.finish_reason)
        if self.over and s.decode_seconds and s.thinking_tokens and s.generated_tokens:
            seconds *= min(1.0, s.thinking_tokens / s.generated_tokens)  # the answer's part out
        self.seconds = seconds

    @property
    def figures(self) -> tuple[int, float | None, str] | None:
        """(tokens, seconds, how it ended), None before any thought."""
        return None if self._began is None else (self.tokens, self.seconds, self.end)

    def saved(self) -> dict[str, Any]:
        """The figures a saved answer keeps (none without a thought)."""
        if self._began is None:
            return {}
        return {"thinking_tokens": self.tokens, "thinking_end": self.end,
                "thinking_seconds": round(self.seconds, 2) if self.seconds is not None else None}


def saved_figures(stats: dict | None) -> tuple[int, float | None, str] | None:
    """A saved answer's thought figures (`ThoughtClock.saved`), None when it kept none."""
    if not stats or "thinking_tokens" not in stats:
        return None
    return (int(stats.get("thinking_tokens") or 0), stats.get("thinking_seconds"),
            str(stats.get("thinking_end") or ""))


def budget_of(chat: Chat) -> int | None:
    """The session's thinking budget (None: no budget). A function given for it (--think's,
    known once the model is chosen) is asked once, at the first answer or dialog."""
    if callable(chat.thinking_budget):
        chat.thinking_budget = chat.thinking_budget()
    return chat.thinking_budget


def in_thought(chat: Chat) -> bool:
    """An answer is being written and it is still in its thought (or has not begun)."""
    stream, view = chat.stream, chat._answer  # noqa: SLF001 - the chat's answer in flight
    return (stream is not None and not stream.cancelled and not stream.finished.is_set()
            and (view is None or not view.text))


def answer_now(chat: Chat) -> None:
    """Ctrl+T: end the thought of the answer in flight now; the answer follows (or say why
    there is no thought to end: a model that does not think, thinking off, nothing written)."""
    from pocketchat.ui.widgets import StatusBar

    if getattr(chat.info, "thinking", None) is False:
        chat.notify("This model does not think: there is no thought for Ctrl+T to end.")
        return
    if not chat.thinking:
        chat.notify("Thinking is off: Ctrl+T ends a thought (Ctrl+P turns thinking on).")
        return
    if chat.stream is None:
        chat.notify("No answer is being written.", severity="warning")
        return
    if not in_thought(chat):
        chat.notify("The thought is over: the answer is being written.")
        return
    chat.stream.end_thinking()
    bar = chat.query_one(StatusBar)
    chat.status(dataclasses.replace(bar.figures, state="Ending the thought"))


def set_thinking(chat: Chat, think: Think) -> None:
    """The thinking of the session's next answers: off, on (the budget so far), a budget, or
    no budget (`unlimited`)."""
    chat.thinking = think.on
    chat.app.refresh_bindings()  # Ctrl+T shows only while thinking is on
    if not think.on:
        chat.notify("Thinking off for the next answers.")
        return
    if not think.default:
        chat.thinking_budget = think.budget
    n = budget_of(chat)
    budget = f"at most {n:,} tokens" if n is not None else "no budget"
    chat.notify(f"Thinking on for the next answers: {budget}.")


def edit_budget(chat: Chat) -> None:
    """The palette's "Thinking budget": a dialog that takes off, on, unlimited or N."""
    from pocketchat.ui.screens import ThinkingBudgetScreen

    n = budget_of(chat)
    current = "off" if not chat.thinking else "unlimited" if n is None else str(n)

    def apply(value: Think | None) -> None:
        if value is not None:
            set_thinking(chat, value)

    chat.app.push_screen(ThinkingBudgetScreen(current), callback=apply)
