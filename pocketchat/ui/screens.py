"""Screens around the chat: loading, download progress, and the small dialogs."""

from __future__ import annotations

import time

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    Footer,
    Input,
    Label,
    LoadingIndicator,
    Markdown,
    OptionList,
    ProgressBar,
    Static,
    TextArea,
)
from textual.widgets.option_list import Option

from pocketchat.conversations import Conversation
from pocketchat.textsafe import one_line, pasted, visible
from pocketchat.ui.format import human_bytes, human_duration, meter
from pocketchat.engines.types import EngineInfo
from pocketchat.ui.widgets import PLACEMENT_WORDS, PromptInput


class KeepsTyping:
    """A start-up screen that passes what is typed (or pasted) to the chat's input box, so a
    question typed while the model loads is there when it is ready."""

    def _prompt(self) -> PromptInput | None:
        for screen in self.app.screen_stack:  # type: ignore[attr-defined]
            found = screen.query(PromptInput)
            if found:
                return found.first()
        return None

    def on_key(self, event: events.Key) -> None:
        prompt = self._prompt()
        if prompt is None:
            return
        if event.key == "backspace":
            prompt.action_delete_left()
        elif event.key in ("ctrl+j", "shift+enter"):
            prompt.action_newline()
        elif event.is_printable and event.character:
            prompt.insert(event.character)
        else:
            return
        event.stop()

    def on_paste(self, event: events.Paste) -> None:
        prompt = self._prompt()
        if prompt is not None:
            prompt.insert(pasted(event.text))
            event.stop()


class StartupScreen(KeepsTyping, Screen):
    """A start-up screen: one box in the middle, out of sight while a question is asked over it
    (a dialog is drawn on a clear screen, not over a box that keeps ticking under it)."""

    def on_screen_suspend(self) -> None:
        for box in self.query(".startup-box"):
            box.display = False

    def on_screen_resume(self) -> None:
        for box in self.query(".startup-box"):
            box.display = True


class LoadingScreen(StartupScreen):
    """Shown while the model loads (a 13 GB file takes a while)."""

    def __init__(self, what: str = "Loading the model") -> None:
        super().__init__(classes="startup")
        self.what = what
        self._started = time.monotonic()
        self.fraction: float | None = None  # of the model file loaded, as the engine reports it

    def compose(self) -> ComposeResult:
        with Vertical(classes="startup-box"):
            yield Label(one_line(self.what), id="loading-title", markup=False)
            yield LoadingIndicator()
            yield Label("", id="loading-elapsed")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(0.5, self._tick)

    def set_what(self, what: str) -> None:
        self.what = what
        self.query_one("#loading-title", Label).update(one_line(what))

    def set_progress(self, stage: str, fraction: float) -> None:
        """The engine's load progress ("loading", 0..1); other stages change nothing shown."""
        if stage == "loading":
            self.fraction = min(max(fraction, 0.0), 1.0)
            self._tick()

    def figures(self) -> str:
        """'42% ████▏░░░░░ · 3.1 s · Ctrl+Q quits' (the share once the engine reports one)."""
        elapsed = f"{human_duration(time.monotonic() - self._started)} · Ctrl+Q quits"
        if self.fraction is None:
            return elapsed
        return f"{self.fraction * 100:.0f}% {meter(self.fraction, 10)} · {elapsed}"

    def _tick(self) -> None:
        self.query_one("#loading-elapsed", Label).update(self.figures())


class DownloadScreen(StartupScreen):
    """Progress of a model download: bytes, percent, speed and time left."""

    def __init__(self, what: str = "Downloading the model") -> None:
        super().__init__(classes="startup")
        self.what = what
        self._samples: list[tuple[float, int]] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="startup-box"):
            yield Label(one_line(self.what), id="download-title", markup=False)
            yield ProgressBar(total=None, show_eta=False, show_percentage=False, id="download-bar")
            yield Label("starting…", id="download-figures")
        yield Footer()

    def update_progress(self, done: int, total: int | None, now: float | None = None) -> str:
        """Show `done` of `total` bytes; returns the figures line (also for tests)."""
        now = time.monotonic() if now is None else now
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > 10:
            self._samples.pop(0)
        t0, d0 = self._samples[0]
        speed = (done - d0) / (now - t0) if now > t0 else 0.0
        bar = self.query_one(ProgressBar)
        parts = [human_bytes(done)]
        if total:
            bar.update(total=total, progress=done)
            parts[0] = f"{human_bytes(done, like=total)} of {human_bytes(total)}"
            parts.append(f"{100 * done / total:.0f}%")
        if speed > 0:
            parts.append(f"{human_bytes(speed)}/s")
            if total and done < total:
                parts.append(f"{human_duration((total - done) / speed)} left")
        line = " · ".join(parts)
        self.query_one("#download-figures", Label).update(line)
        return line


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__(classes="dialog")
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(visible(self.question), markup=False, classes="question")
            with Horizontal(classes="buttons"):
                yield Button("Yes", variant="primary", id="yes")
                yield Button("No", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class SystemPromptScreen(ModalScreen["str | None"]):
    """Edit the system prompt; Ctrl+S saves, Esc cancels."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Save"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, current: str | None) -> None:
        super().__init__(classes="dialog")
        self.current = current or ""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box wide"):
            yield Label("System prompt (applies to this chat; empty = none)")
            yield TextArea(self.current, id="system-text", soft_wrap=True)
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_save() if event.button.id == "save" else self.action_cancel()

    def action_save(self) -> None:
        self.dismiss(self.query_one("#system-text", TextArea).text.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class ThinkingBudgetScreen(ModalScreen["Think | None"]):
    """Set the thinking of this session's next answers: off, on, unlimited or a budget in
    tokens; Enter sets it, Esc cancels; a value it cannot take is said under the field."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str) -> None:
        super().__init__(classes="dialog")
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Label("Thinking budget for the next answers: a number of tokens, "
                        "off, on or unlimited")
            yield Input(self.current, id="budget-value")
            yield Label("", id="budget-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Set", variant="primary", id="set")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.action_set()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_set() if event.button.id == "set" else self.action_cancel()

    def action_set(self) -> None:
        from pocketchat.errors import UsageError
        from pocketchat.select.thinking import parse_think

        text = self.query_one("#budget-value", Input).value
        try:
            value = parse_think(text, flag="the budget")
        except UsageError as exc:
            self.query_one("#budget-error", Label).update(visible(exc.message))
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class AttachScreen(ModalScreen["str | None"]):
    """Ask for the path of a file to attach; Enter attaches it, Esc cancels (a file dropped on
    the terminal types its path here)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, typed: str = "") -> None:
        super().__init__(classes="dialog")
        self.typed = typed

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box wide"):
            yield Label("Attach a file: its path (text, Markdown, code, CSV, JSON, HTML or PDF)")
            yield Input(one_line(self.typed), placeholder="~/notes.md, /path/to/report.pdf",
                        id="attach-path")
            with Horizontal(classes="buttons"):
                yield Button("Attach", variant="primary", id="attach")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.action_attach()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_attach() if event.button.id == "attach" else self.action_cancel()

    def action_attach(self) -> None:
        self.dismiss(self.query_one("#attach-path", Input).value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class InfoScreen(ModalScreen[None]):
    """A page of Markdown (hardware and recommendation); Esc closes."""

    BINDINGS = [Binding("escape,q", "close", "Close")]

    def __init__(self, markdown: str) -> None:
        super().__init__(classes="dialog")
        self.markdown = markdown

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog-box tall", id="info-page"):
            yield Markdown(visible(self.markdown))
        yield Footer()

    def action_close(self) -> None:
        self.dismiss(None)


def about_markdown(info: EngineInfo | None, extra: str | None) -> str:
    """The 'Hardware and recommendation' page: what runs, and the CLI's account of why."""
    lines = ["# What is running", ""]
    if info is None:
        lines.append("No model is running.")
    else:
        placement = PLACEMENT_WORDS.get(info.placement, info.placement)
        lines += [f"- **Model:** {info.model}", f"- **Backend:** {info.backend}",
                  f"- **Placement:** {placement}", f"- **Context:** {info.n_ctx} tokens"]
        if info.path:
            lines.append(f"- **File:** `{info.path}`")
    if extra:
        lines += ["", extra]
    return "\n".join(lines)


class ConversationsScreen(ModalScreen["Conversation | None"]):
    """Pick a saved conversation; Enter opens it, Esc goes back."""

    BINDINGS = [Binding("escape", "close", "Back")]

    def __init__(self, conversations: list[Conversation]) -> None:
        super().__init__(classes="dialog")
        self.conversations = conversations

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box wide tall"):
            yield Label(f"Saved conversations ({len(self.conversations)})")
            if self.conversations:
                yield OptionList(
                    *[
                        Option(conversation_line(c), id=str(i))
                        for i, c in enumerate(self.conversations)
                    ]
                )
            else:
                yield Label("None yet: your chats are saved here as you go.")
        yield Footer()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.conversations[int(event.option.id or 0)])

    def action_close(self) -> None:
        self.dismiss(None)


def conversation_line(c: Conversation) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated or c.created))
    count = sum(1 for m in c.messages if m.role == "user")
    answers = [m for m in c.messages if m.role == "assistant"]
    mark = " (interrupted)" if answers and answers[-1].interrupted else ""  # only the last counts
    return f"{when}  {one_line(c.display_title)}  · {count} prompt{'s' if count != 1 else ''}{mark}"
