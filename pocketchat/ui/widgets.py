"""The chat's widgets: header, messages, the prompt input and the live status bar."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from textual import events
from textual._context import NoActiveAppError
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.geometry import Size, Spacing
from textual.layout import DockArrangeResult
from textual.message import Message
from textual.widgets import Static, TextArea

from pocketchat.documents.attachment import Attachment
from pocketchat.engines.types import EngineInfo, Stats
from pocketchat.textsafe import one_line, pasted, visible
from pocketchat.ui.answer import AnswerView  # noqa: F401 - a message widget like the others
from pocketchat.ui.fitline import Part, fit
from pocketchat.ui.follow import Follower
from pocketchat.ui.pastedpath import pasted_paths
from pocketchat.ui.fitline import plain as fitted_text
from pocketchat.ui.format import (
    compact_count, draft_figure, human_bytes, human_duration, meter, thinking_figure,
)


PLACEMENT_WORDS = {"cpu": "CPU", "gpu": "GPU, all layers", "gpu+cpu-experts": "GPU + experts on CPU"}


class EngineHeader(Static):
    """One line saying what runs: model, backend, placement, context size (fitted to its width:
    the model and the state stay longest)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[EngineInfo | None, str] = (None, "")

    def show(self, info: EngineInfo | None, state: str = "") -> None:
        self._shown = (info, state)
        if info is None:
            parts = [Part.of("pocketchat", 20, sep=" · "), Part.of(one_line(state or "no model loaded"), 90, sep=" · ")]
        else:
            placement = PLACEMENT_WORDS.get(info.placement, info.placement)  # a bare plan word
            words = [("pocketchat", 20), (info.model, 100), (info.backend, 40), (placement, 50),
                     (f"ctx {info.n_ctx}", 60), (state, 95)]
            parts = [Part.of(one_line(text), keep, sep=" · ") for text, keep in words if text]
        width = self.content_size.width or max(self.app.size.width - 2, 1)
        self.update(Content(fitted_text(fit(parts, width))))

    def on_resize(self) -> None:
        self.show(*self._shown)


class ChatLog(VerticalScroll):
    """The scrolling conversation; while an answer streams, its follower places the view each
    time the log is arranged (ui/follow.py)."""

    can_focus = False
    follower: Follower | None = None

    def arrange(self, size: Size, optimal: bool = False) -> DockArrangeResult:
        arrangement = super().arrange(size, optimal)
        if self.follower is None or optimal:
            return arrangement
        room = self.follower.place(arrangement, size)
        if not room:
            return arrangement
        # The blank rows under the text are not content: not scrolled to, not in the scrollbar.
        top, right, bottom, left = arrangement.scroll_spacing
        return replace(arrangement, scroll_spacing=Spacing(top, right, bottom - room, left),
                       _spatial_map=arrangement.spatial_map)


WELCOME = (
    "Ask anything below: Enter sends, Ctrl+J makes a new line, Up recalls a prompt.\n"
    "Esc stops an answer · Ctrl+N new chat · Ctrl+P commands · Ctrl+Q quits.\n"
    "Chats are saved as you go; `pocketchat --continue` reopens the last one."
)


class Welcome(Static):
    """Shown in an empty chat."""

    def __init__(self) -> None:
        super().__init__(WELCOME, markup=False, id="welcome")


class UserMessage(Static):
    """What the user sent, shown as typed (no markup), under the names of its files (never
    their text)."""

    def __init__(self, text: str, attachments: Sequence[Attachment] = (),
                 tokens: Sequence[int] | None = None) -> None:
        if not attachments:
            super().__init__(visible(text), markup=False, classes="message user")
            return
        counts = list(tokens or ())
        lines = Content("\n").join(
            Content.styled(sent_file_line(a, counts[i] if i < len(counts) else None), "$text-muted")
            for i, a in enumerate(attachments))
        body = lines + Content("\n" + visible(text)) if text else lines
        super().__init__(body, markup=False, classes="message user")


def sent_file_line(attachment: Attachment, tokens: int | None = None) -> str:
    """'❐ report.pdf · 12 pages · 8,312 tokens' (the name's control characters shown; the
    tokens as the chip counted them, else estimated)."""
    parts = [f"❐ {one_line(attachment.name)}"]
    if attachment.pages:
        parts.append(f"{attachment.pages} page{'' if attachment.pages == 1 else 's'}")
    if attachment.excerpt:
        parts.append(one_line(attachment.excerpt))
    if isinstance(tokens, int) and tokens > 0:
        parts.append(f"{tokens:,} tokens")
    else:
        parts.append(f"~{compact_count(max(1, len(attachment.text) // 4))} tokens")
    return " · ".join(parts)


class Notice(Static):
    """A message from pocketchat itself: an error, a warning, or news (not sent to the model)."""

    def __init__(self, text: str, hint: str = "", kind: str = "error") -> None:
        body = text if not hint else f"{text}\n{hint}"
        super().__init__(visible(body), markup=False, classes=f"notice {kind}")
        self.kind = kind


def figures_line(stats: dict | None) -> str:
    """'42 tokens · 31.2 tok/s · TTFT 210 ms' from a saved stats summary."""
    if not stats:
        return ""
    parts = [f"{stats.get('generated_tokens', 0)} tokens"]
    if stats.get("decode_tok_s"):
        parts.append(f"{stats['decode_tok_s']:.1f} tok/s")
    if stats.get("ttft_seconds") is not None:
        parts.append(f"TTFT {human_duration(stats['ttft_seconds'])}")
    line = " · ".join(parts)
    if stats.get("retrieval"):  # the files did not fit: which passages the answer read
        line += "\n" + one_line(str(stats["retrieval"]))
        sources = [one_line(str(s)) for s in stats.get("sources") or ()]
        if sources:
            line += "\nsources: " + "; ".join(sources)
    return line


class PromptInput(TextArea):
    """Multi-line input: Enter sends, Ctrl+J (or Shift+Enter) makes a new line, Up recalls."""

    BINDINGS = [
        Binding("ctrl+j", "newline", "New line", key_display="^j", show=False),  # the placeholder says it
        Binding("shift+enter", "newline", "New line", show=False),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class PathsPasted(Message):
        """A paste that is only the paths of readable files (a file dropped on the terminal)."""

        def __init__(self, text: str, paths: list) -> None:
            super().__init__()
            self.text, self.paths = text, paths

    class RemoveAttachment(Message):
        """Backspace in an empty input with files attached: the last one goes."""

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.cursor_blink = False  # a steady cursor: a blink repaints twice a second, answers or not
        self.sent: list[str] = []
        self._recall: int | None = None
        self._draft = ""
        self.attached = 0  # files attached to the message (Enter sends them without text)

    def action_newline(self) -> None:
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)

    async def _on_paste(self, event: events.Paste) -> None:
        # Control characters in a paste are shown (ESC as ␛), never kept raw; see ui/pasteguard.py.
        event.stop()
        event.prevent_default()
        if self.read_only:
            return
        paths = pasted_paths(event.text)
        if paths:  # the chat offers to attach them; declined, the text is pasted after all
            self.post_message(self.PathsPasted(event.text, paths))
            return
        self.paste_text(event.text)

    def paste_text(self, text: str) -> None:
        start, end = self.selection
        self.replace(pasted(text), start, end, maintain_selection_offset=False)

    def remember(self, text: str) -> None:
        if text and (not self.sent or self.sent[-1] != text):
            self.sent.append(text)
        self._recall = None

    async def _on_key(self, event: events.Key) -> None:
        # Handled here, in order with the typed characters (a binding's action would run
        # later, after the rest of a fast burst of keys such as a terminal's paste).
        if event.key in ("ctrl+j", "shift+enter"):
            event.stop()
            event.prevent_default()
            self.action_newline()
            return
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text.strip()
            if text or self.attached:
                self.post_message(self.Submitted(text))
            return
        if event.key == "backspace" and self.attached and not self.text:
            event.stop()
            event.prevent_default()
            self.post_message(self.RemoveAttachment())
            return
        if event.key == "up" and self.cursor_location[0] == 0 and self.sent:
            event.stop()
            event.prevent_default()
            self._recall_step(-1)
            return
        if event.key == "down" and self._recall is not None and self._on_last_row():
            event.stop()
            event.prevent_default()
            self._recall_step(+1)
            return
        await super()._on_key(event)

    def _on_last_row(self) -> bool:
        return self.cursor_location[0] >= self.document.line_count - 1

    def _recall_step(self, step: int) -> None:
        if self._recall is None:
            if step > 0:
                return
            self._draft = self.text
            index = len(self.sent) - 1
        else:
            index = self._recall + step
        if index < 0:
            return
        if index >= len(self.sent):
            self._recall = None
            self.load_text(self._draft)
        else:
            self._recall = index
            self.load_text(self.sent[index])
        self.move_cursor(self.document.end)


@dataclass
class StatusFigures:
    """What the status bar shows."""

    state: str = "Ready"
    decode_tok_s: float | None = None
    ttft_seconds: float | None = None
    tokens: int | None = None
    context_used: int = 0
    context_limit: int = 0
    memory_bytes: int | None = None
    reused_tokens: int = 0  # of prompt_length, taken from the prompt cache
    prompt_length: int = 0
    threads_note: str = ""  # the CPU threads moved: '1 of 2 threads: the machine is busy'
    thinking_tokens: int = 0  # of the answer's thought so far (the engine's count)
    thinking_budget: int | None = None  # the budget the thought is held to (None: none)
    draft_per_step: float = 0.0  # tokens per step that verified a draft (0: no such step)


def context_level(used: int, limit: int) -> str:
    if limit <= 0:
        return "ok"
    fraction = used / limit
    return "full" if fraction >= 0.9 else "warn" if fraction >= 0.75 else "ok"


class StatusBar(Static):
    """Live figures: state, decode tok/s (of the last seconds), why the CPU threads moved (when
    they did), time to first token, tokens, context, memory.

    One line, fitted to its width (ui/fitline.py: a figure not known yet goes first, the state
    and the context last), repainted only when its text changes and never re-laid out (its size
    is fixed), so a refresh costs little while the model streams.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.figures = StatusFigures(state="Starting")
        self.level = "ok"
        self.plain = ""

    def on_mount(self) -> None:
        self.show(self.figures)

    def on_resize(self) -> None:
        self.plain = ""  # fitted again to the new width
        self.show(self.figures)

    def show(self, f: StatusFigures) -> None:
        self.figures = f
        level = context_level(f.context_used, f.context_limit) if f.context_limit else "ok"
        line = fit(status_parts(f, level), self._width())
        plain = fitted_text(line)
        if plain == self.plain and level == self.level:
            return
        self.plain, self.level = plain, level
        self.set_class(level == "warn", "-ctx-warn")
        self.set_class(level == "full", "-ctx-full")
        content = Content("").join(Content(sep) + Content.styled(text, style) for sep, text, style in line)
        self.update(content, layout=False)

    def _width(self) -> int:
        """The cells the line has (before the first layout: the screen's width less the padding)."""
        if self.content_size.width:
            return self.content_size.width
        try:
            return max(self.app.size.width - 2, 1)
        except NoActiveAppError:  # a bar outside any app (a test's): nothing to fit it to
            return 1_000


def status_parts(f: StatusFigures, level: str) -> list[Part]:
    """The status bar's parts, each kept as long as its `keep` says (see ui/fitline.py).

    Kept longest: the state's first words, then the context; a state's later " · " pieces
    (the prompt's rate and time left) give way before it; figures not known yet ("–", 0
    tokens) go first.
    """
    head, *rest = f.state.split(" · ")
    parts = [Part.of(head, 100, "$accent bold")]
    parts += [Part.of(piece, 70 - i, "$accent bold", sep=" · ") for i, piece in enumerate(rest)]
    speed = f"{f.decode_tok_s:.1f} tok/s" if f.decode_tok_s else "– tok/s"
    parts.append(Part.of(speed, 60 if f.decode_tok_s else 10, "$success bold"))
    if f.threads_note:  # why the CPU threads moved: kept before the smaller figures
        parts.append(Part.of(f.threads_note, 55, "$warning"))
    known = f.ttft_seconds is not None
    parts.append(Part.of(f"TTFT {human_duration(f.ttft_seconds) if known else '–'}", 30 if known else 10))
    if f.prompt_length:
        parts.append(Part.of(f"cached {f.reused_tokens:,}/{f.prompt_length:,}", 20))
    if f.thinking_tokens:  # the thought against its budget: kept while the model thinks
        thinking = f.state.startswith(("Thinking", "Ending the thought"))
        parts.append(Part.of(thinking_figure(f.thinking_tokens, f.thinking_budget),
                             45 if thinking else 15))
    if drafted := draft_figure(f.draft_per_step):  # accepted drafts: what a step emitted
        parts.append(Part.of(drafted, 25))
    tokens = f.tokens or 0
    parts.append(Part.of(f"{tokens} tokens", 50 if tokens else 10))
    if f.context_limit:
        figure = f"ctx {compact_count(f.context_used)}/{compact_count(f.context_limit)}"
        style = {"ok": "", "warn": "$warning", "full": "$error bold"}[level]
        parts.append(Part.of(f"{figure} {meter(f.context_used / f.context_limit, 8)}", 65, style,
                             shorter=[(figure, 90)]))
    else:
        parts.append(Part.of("ctx –", 10))
    known = f.memory_bytes is not None
    parts.append(Part.of(f"mem {human_bytes(f.memory_bytes) if known else '–'}", 40 if known else 10))
    return parts


def figures_from_stats(
    stats: Stats | None, state: str, memory: int | None, limit: int, elapsed_ttft: float | None,
    thinking_budget: int | None = None,
) -> StatusFigures:
    if stats is None:
        return StatusFigures(state=state, ttft_seconds=elapsed_ttft, tokens=0,
                             context_limit=limit, memory_bytes=memory,
                             thinking_budget=thinking_budget)
    ttft = stats.ttft_seconds if stats.ttft_seconds is not None else elapsed_ttft
    return StatusFigures(
        state=state,
        decode_tok_s=stats.recent_tok_s or stats.decode_tok_s or None,  # the last seconds
        ttft_seconds=ttft,
        tokens=stats.generated_tokens,
        context_used=stats.context_used,
        context_limit=stats.context_limit or limit,
        memory_bytes=memory,
        reused_tokens=stats.reused_tokens,
        prompt_length=stats.prompt_length,
        threads_note=stats.threads_note,
        thinking_tokens=stats.thinking_tokens,
        thinking_budget=thinking_budget,
        draft_per_step=stats.tokens_per_step,
    )
