"""The chat app: `create_app(engine_factory, ...)` builds it; the CLI and the tests both use it."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Callable

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer

from pocketchat.conversations import Conversation
from pocketchat.errors import EngineCrashed
from pocketchat.engines.types import ChatOptions, Engine, EngineInfo
from pocketchat.ui.commands import PaletteCommands, describe_error
from pocketchat.ui.screens import DownloadScreen, LoadingScreen
from pocketchat.ui.startup import (
    FATAL_AT_START,
    EngineFactory,
    EngineFailed,
    EngineReady,
    StartupHooks,
    StartupProgress,
    StartupStatus,
    prestart_process_helpers,
    start_engine,
)
from pocketchat.ui.streaming import (
    AnswerStream,
    MemoryFn,
    MemoryProbe,
    RenderPacer,
    StreamUpdate,
    engine_pid,
)
from pocketchat.ui.widgets import (
    AnswerView,
    ChatLog,
    EngineHeader,
    Notice,
    PromptInput,
    StatusBar,
    StatusFigures,
    UserMessage,
    Welcome,
    figures_from_stats,
    figures_line,
)

RESTART_HINT = "Ctrl+R restarts the engine (this conversation is kept); Ctrl+N starts a new chat."


class ChatApp(PaletteCommands, App[int]):
    """Chat with one engine; every message is saved as it happens."""

    TITLE = "pocketchat"
    CSS_PATH = "chat.tcss"
    BINDINGS = [
        Binding("escape", "stop", "Stop answer"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+r", "restart", "Restart engine"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        engine_factory: EngineFactory,
        *,
        prepare: Callable[[StartupHooks], object] | None = None,
        conversation: Conversation | None = None,
        system: str | None = None,
        thinking: bool = True,
        options: ChatOptions | None = None,
        about: Callable[[], str] | str | None = None,
        memory_probe: MemoryFn | None = None,
        save_interval: float = 1.0,
    ) -> None:
        super().__init__()
        prestart_process_helpers()
        self.engine_factory = engine_factory
        self.prepare = prepare
        self.default_system = system
        self.conversation = conversation or Conversation(system=system)
        if conversation is not None and system is not None:
            self.conversation.system = system
        self.thinking = thinking
        self.base_options = options or ChatOptions()
        self.about = about
        self.save_interval = save_interval
        self._memory_probe = memory_probe
        self.engine: Engine | None = None
        self.info: EngineInfo | None = None
        self.fatal_error: BaseException | None = None
        self.stream: AnswerStream | None = None
        self._answer: AnswerView | None = None
        self._pump_timer: Timer | None = None
        self._pacer = RenderPacer()
        self._memory: int | None = None
        self._prepared = False
        self._starting = False
        self._previous: AnswerStream | None = None  # a stream left behind by Ctrl+N

    # -- layout ------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield EngineHeader(id="header")
        yield ChatLog(id="chat-log")
        yield PromptInput(id="prompt", placeholder="Ask anything · Enter sends · Ctrl+J new line")
        yield StatusBar(id="status")
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one(EngineHeader).show(None, "starting")
        await self._show_conversation(self.conversation)
        self.query_one(PromptInput).focus()
        self.set_interval(2.0, self._sample_memory)
        self._open_engine("Loading the model")

    @property
    def chat_log(self) -> ChatLog:
        return self.query_one(ChatLog)

    async def _show_conversation(self, conversation: Conversation) -> None:
        log = self.chat_log
        await log.remove_children()
        widgets = []
        prompt = self.query_one(PromptInput)
        for message in conversation.messages:
            if message.role == "user":
                widgets.append(UserMessage(message.content))
                prompt.remember(message.content)
            elif message.role == "assistant":
                view = AnswerView(message.content, message.thinking)
                widgets.append(view)
        if not widgets:
            await log.mount(Welcome())
        else:
            await log.mount_all(widgets)
            for view, message in zip(
                log.query(AnswerView).results(AnswerView),
                [m for m in conversation.messages if m.role == "assistant"],
            ):
                view.set_figures(figures_line(message.stats), message.interrupted)
        log.scroll_end(animate=False)

    def notice(self, text: str, hint: str = "", kind: str = "error") -> Notice:
        widget = Notice(text, hint, kind)
        self.chat_log.mount(widget)
        self.chat_log.scroll_end(animate=False)
        return widget

    def _status(self, figures: StatusFigures) -> None:
        self.query_one(StatusBar).show(figures)

    def _idle_status(self, state: str = "Ready") -> None:
        bar = self.query_one(StatusBar)
        old = getattr(bar, "figures", StatusFigures())
        limit = self.info.n_ctx if self.info else old.context_limit
        bar.show(StatusFigures(state, old.decode_tok_s, old.ttft_seconds, old.tokens,
                               old.context_used, limit or 0, self._memory))

    # -- the engine ----------------------------------------------------------------------
    def _open_engine(self, what: str) -> None:
        if self._starting:
            return
        self._starting = True
        self.push_screen(LoadingScreen(what))
        prepare = None if self._prepared else self.prepare
        start_engine(self, self.engine_factory, prepare)

    def _startup_screen(self) -> Screen | None:
        screen = self.screen
        return screen if isinstance(screen, (LoadingScreen, DownloadScreen)) else None

    def on_startup_status(self, message: StartupStatus) -> None:
        screen = self._startup_screen()
        if isinstance(screen, DownloadScreen):
            self.switch_screen(LoadingScreen(message.text))
        elif isinstance(screen, LoadingScreen):
            screen.set_what(message.text)

    def on_startup_progress(self, message: StartupProgress) -> None:
        screen = self._startup_screen()
        if isinstance(screen, LoadingScreen):
            screen = DownloadScreen(message.what or "Downloading the model")
            self.switch_screen(screen)
            self.call_after_refresh(screen.update_progress, message.done, message.total, message.at)
        elif isinstance(screen, DownloadScreen):
            screen.update_progress(message.done, message.total, message.at)

    def _close_startup_screens(self) -> None:
        while self._startup_screen() is not None:
            self.pop_screen()

    def on_engine_ready(self, message: EngineReady) -> None:
        self._starting = False
        self._prepared = True
        self.engine = message.engine
        self.info = message.engine.info
        if not self._memory_probe:
            self._memory_probe = MemoryProbe(engine_pid(message.engine))
        self.conversation.model = self.conversation.model or self.info.model
        self._close_startup_screens()
        self.refresh_bindings()
        self.query_one(EngineHeader).show(self.info)
        self._sample_memory()
        self._idle_status()

    def on_engine_failed(self, message: EngineFailed) -> None:
        self._starting = False
        error = message.error
        if isinstance(error, FATAL_AT_START):
            self.fatal_error = error
            self.exit(1, return_code=1)
            return
        self._close_startup_screens()
        self.refresh_bindings()
        self.query_one(EngineHeader).show(None, "no model running")
        text, hint = describe_error(error)
        self.notice(f"Could not start the model: {text}", hint or "Ctrl+R tries again.")
        self._idle_status("No model")

    def _engine_gone(self) -> None:
        engine, self.engine = self.engine, None
        self.query_one(EngineHeader).show(self.info, "engine stopped")
        if engine is not None:
            self._close_quietly(engine)

    @work(thread=True, group="close")
    def _close_quietly(self, engine: Engine) -> None:
        try:
            engine.close()
        except Exception:  # noqa: BLE001 - a dead engine may fail to close; nothing to do
            pass

    def _sample_memory(self) -> None:
        if self._memory_probe is not None:
            self._memory = self._memory_probe()
            if self.stream is None:
                self._idle_status(self.query_one(StatusBar).figures.state)

    # -- sending and streaming ------------------------------------------------------------
    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        if self.stream is not None:
            self.notify("An answer is still streaming: Esc stops it.", severity="warning")
            return
        if self.engine is None:
            why = "still loading" if self._starting else "not running (Ctrl+R restarts it)"
            self.notify(f"The model is {why}.", severity="warning")
            return
        prompt = self.query_one(PromptInput)
        prompt.remember(event.text)
        prompt.clear()
        await self.send(event.text)

    async def send(self, text: str) -> None:
        assert self.engine is not None
        if self._previous is not None:  # one answer at a time: let a stopped one end first
            await asyncio.to_thread(self._previous.wait, 10.0)
            self._previous = None
        conversation = self.conversation
        conversation.add("user", text)
        history = conversation.engine_messages()
        message = conversation.add("assistant", interrupted=True)
        view = AnswerView(streaming=True)
        for welcome in self.chat_log.query(Welcome):
            await welcome.remove()
        await self.chat_log.mount_all([UserMessage(text), view])
        self.chat_log.anchor()
        self._answer = view
        options = dataclasses.replace(self.base_options, thinking=self.thinking)
        self.stream = AnswerStream(self.engine, conversation, message, history, options,
                                   save_interval=self.save_interval)
        self._status(figures_from_stats(None, "Waiting for the first token", self._memory,
                                        self.info.n_ctx if self.info else 0, None))
        self._run_stream(self.stream)
        self._pacer = RenderPacer()
        self._pump_timer = self.set_interval(self._pacer.interval, self._pump)
        self.refresh_bindings()

    @work(thread=True, group="stream", exit_on_error=False)
    def _run_stream(self, stream: AnswerStream) -> None:
        stream.run()

    async def _pump(self) -> None:
        """Render what arrived since the last tick (at most 20 times a second, see RenderPacer)."""
        stream, view = self.stream, self._answer
        if stream is None or view is None:
            return
        update = stream.drain()
        if update.thinking:
            await view.add_thinking(update.thinking)
        if update.text:
            await view.add_text(update.text)
        state = "Answering" if view.text else "Thinking" if view.thinking else "Waiting for the first token"
        limit = self.info.n_ctx if self.info else 0
        self._status(figures_from_stats(update.stats, state, self._memory, limit,
                                        update.first_token_at))
        if update.done:
            await self._finish(stream, view, update)
        elif self._pacer.sample() and self._pump_timer is not None:
            self._pump_timer.stop()  # rendering costs too much (or little): a new pace
            self._pump_timer = self.set_interval(self._pacer.interval, self._pump)

    async def _finish(self, stream: AnswerStream, view: AnswerView, update: StreamUpdate) -> None:
        if self._pump_timer is not None:
            self._pump_timer.stop()
            self._pump_timer = None
        self.stream, self._answer = None, None
        self.refresh_bindings()
        message = stream.message
        await view.finish(figures_line(message.stats), message.interrupted)
        stats = update.stats
        if update.exception is not None:
            self._answer_failed(update.exception)
        elif update.finish_reason == "error":
            self.notice(f"The model could not answer: {update.error or 'unknown error'}",
                        "Try again, or start a new chat with Ctrl+N.")
        elif update.finish_reason == "length":
            used = stats.context_used if stats else 0
            limit = (stats.context_limit if stats else 0) or (self.info.n_ctx if self.info else 0)
            self.notice(f"The context is full ({used}/{limit} tokens): the answer stopped there.",
                        "Start a new chat with Ctrl+N, or restart with a larger --ctx.", "warning")
        if stats is not None and stats.dropped_messages:
            self.notice(f"{stats.dropped_messages} earlier messages no longer fit the context "
                        "and were left out of what the model saw.", kind="info")
        if stream.save_error is not None:
            self.notice(f"Could not save the conversation: {stream.save_error}",
                        "Free some disk space; the chat goes on.", "warning")
        self._idle_status("Stopped" if message.interrupted else "Ready")

    def _answer_failed(self, error: BaseException) -> None:
        text, hint = describe_error(error)
        if isinstance(error, EngineCrashed):
            self._engine_gone()
            self.notice(f"The engine stopped: {text}", RESTART_HINT)
        else:
            self.notice(f"The answer failed: {text}", hint or RESTART_HINT)

    # -- actions ---------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
            self._status(StatusFigures(**{**self.query_one(StatusBar).figures.__dict__,
                                          "state": "Stopping"}))

    async def action_new_chat(self) -> None:
        await self.open_conversation(Conversation(system=self.default_system,
                                                  model=self.info.model if self.info else ""))

    async def open_conversation(self, conversation: Conversation) -> None:
        if self.stream is not None:
            stream = self._previous = self.stream
            stream.cancel()  # the thread saves the old conversation as far as it got
            if self._pump_timer is not None:
                self._pump_timer.stop()
                self._pump_timer = None
            self.stream, self._answer = None, None
        self.conversation = conversation
        await self._show_conversation(conversation)
        bar = self.query_one(StatusBar)
        bar.figures = StatusFigures()
        self._idle_status()
        self.query_one(PromptInput).focus()

    def action_restart(self) -> None:
        if self.stream is not None:
            self.notify("Stop the answer first (Esc).", severity="warning")
            return
        if self._starting:
            return
        if self.engine is not None:
            self._engine_gone()
        self._open_engine("Restarting the engine")

    async def action_quit(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
        self.exit(0)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide keys that do nothing now (Esc without an answer, chat keys while loading)."""
        if action == "stop":
            return self.stream is not None
        if action in ("new_chat", "restart"):
            return self._startup_screen() is None and not self._starting
        return True

    async def on_unmount(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
            self.stream.wait(5.0)
        engine, self.engine = self.engine, None
        if engine is not None:
            try:
                engine.close()
            except Exception:  # noqa: BLE001
                pass


def create_app(engine_factory: EngineFactory, **kwargs) -> ChatApp:
    """Build the chat app (the CLI passes the real engine's factory, tests a scripted one)."""
    return ChatApp(engine_factory, **kwargs)
