"""The chat app: `create_app(engine_factory, ...)` builds it; the CLI and the tests both use it.

A thin app over the `Chat` widget: it opens the engine (startup screens, download progress),
hands it to the chat, restarts it, closes it, and holds the keys and the command palette.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any, Callable

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

from pocketchat.conversations import Conversation
from pocketchat.paths import settings
from pocketchat.engines.types import ChatOptions, Engine, EngineInfo
from pocketchat.ui import enginewatch
from pocketchat.ui.chat import RESTART_HINT, Chat
from pocketchat.ui.thinking import answer_now
from pocketchat.ui.format import describe_error
from pocketchat.ui.messages import (EngineFailed, EngineLost, EngineReady, LoadProgress,
                                    StartupNote, StartupProgress, StartupStatus)
from pocketchat.ui.palette import ChatCommands
from pocketchat.ui.priority import lower_ui_priority
from pocketchat.ui.screens import DownloadScreen, InfoScreen, LoadingScreen, about_markdown
from pocketchat.ui.startup import (
    FATAL_AT_START,
    EngineFactory,
    StartupHooks,
    prestart_process_helpers,
    start_engine,
)
from pocketchat.ui.streaming import AnswerStream, MemoryFn, MemoryProbe, engine_alive, engine_pid
from pocketchat.ui.widgets import EngineHeader

EXIT_GRACE = 20.0  # seconds after SIGTERM/SIGHUP before the process ends however far the app got
CTRL_C_AGAIN = 3.0  # on an idle chat, a second Ctrl+C within this many seconds quits


class ChatApp(App[int]):
    """Chat with one engine; every message is saved as it happens."""

    TITLE = "pocketchat"
    CSS_PATH = "chat.tcss"
    COMMANDS = {ChatCommands} | App.COMMANDS
    BINDINGS = [
        Binding("escape", "stop", "Stop answer"),
        Binding("ctrl+t", "answer_now", "Answer", tooltip="Answer now: end the thinking"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+o", "attach", "Attach a file", show=False),  # the palette says it too
        Binding("ctrl+r", "restart", "Restart engine"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+c", "interrupt", "Stop answer / quit", show=False, priority=True),
    ]

    def __init__(
        self,
        engine_factory: EngineFactory,
        *,
        prepare: Callable[[StartupHooks], object] | None = None,
        conversation: Conversation | None = None,
        system: str | None = None,
        thinking: bool = True,
        thinking_budget: Callable[[], int | None] | int | None = None,
        options: ChatOptions | None = None,
        about: Callable[[], str] | str | None = None,
        memory_probe: MemoryFn | None = None,
        save_interval: float = 1.0,
        ui_nice: int = 0,
        tools: Any = None,
    ) -> None:
        super().__init__()
        prestart_process_helpers()
        self.engine_factory = engine_factory
        self.prepare = prepare
        self.about = about
        self.chat = Chat(conversation, system=system, thinking=thinking, options=options,
                         save_interval=save_interval, thinking_budget=thinking_budget,
                         tools=tools)  # a `tools.servers.ToolServers`, or None
        self._memory_probe = memory_probe
        self._own_probe = memory_probe is None  # ours follows the engine's worker across restarts
        self._ctrl_c_at = -CTRL_C_AGAIN
        self._ctrl_c_stopped: AnswerStream | None = None  # the answer a Ctrl+C stopped
        self.engine: Engine | None = None
        self.info: EngineInfo | None = None
        self.fatal_error: BaseException | None = None
        self._prepared = False
        self.ui_nice = ui_nice  # lower the UI's threads by this much once the engine runs
        self._ended = threading.Event()  # App.run returned (see _exit_if_stuck)
        self._starting = False

    # -- what the chat holds, for the CLI and the tests --------------------------------
    @property
    def conversation(self) -> Conversation:
        return self.chat.conversation

    @property
    def stream(self) -> AnswerStream | None:
        return self.chat.stream

    @property
    def base_options(self) -> ChatOptions:
        return self.chat.base_options

    @base_options.setter
    def base_options(self, options: ChatOptions) -> None:
        self.chat.base_options = options

    @property
    def thinking(self) -> bool:
        return self.chat.thinking

    def get_driver_class(self):
        """Textual's driver, with pasted ESC kept in the paste (see ui/pasteguard.py)."""
        from pocketchat.ui.pasteguard import safe_paste_driver

        return safe_paste_driver(super().get_driver_class())

    # -- layout ------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield EngineHeader(id="header")
        yield self.chat
        yield Footer()

    async def on_mount(self) -> None:
        self._catch_signals()
        self.query_one(EngineHeader).show(None, "starting")
        self.set_interval(2.0, self._sample_memory)
        self.set_interval(enginewatch.POLL, lambda: enginewatch.watch(self))
        self._open_engine("Loading the model")

    # -- the engine ----------------------------------------------------------------------
    def _open_engine(self, what: str) -> None:
        if self._starting:
            return
        self._starting = self.chat.starting = True
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

    def on_load_progress(self, message: LoadProgress) -> None:
        screen = self._startup_screen()
        if isinstance(screen, LoadingScreen):
            screen.set_progress(message.stage, message.fraction)

    def on_startup_note(self, message: StartupNote) -> None:
        self.chat.notice(message.text, kind="warning")

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
        self._starting = self.chat.starting = self.chat.stuck = False
        self._prepared = True
        self.engine = self.chat.engine = message.engine
        self.info = self.chat.info = message.engine.info
        if self._own_probe:  # a restarted engine is a new worker process
            self._memory_probe = MemoryProbe(engine_pid(message.engine))
        self.conversation.model = self.conversation.model or self.info.model
        self._close_startup_screens()
        self.refresh_bindings()
        self.query_one(EngineHeader).show(self.info)
        for note in getattr(self.info, "notes", ()):
            self.chat.notice(note, kind="info")
        self._sample_memory()
        self.chat.idle_status()
        self.chat.restore_state()
        self.chat.files.resume()  # files attached while it loaded: read now
        if self.ui_nice:  # once: threads started later inherit it
            lower_ui_priority(self.ui_nice)
            self.ui_nice = 0

    def on_engine_failed(self, message: EngineFailed) -> None:
        self._starting = self.chat.starting = False
        error = message.error
        if isinstance(error, FATAL_AT_START):
            self.fatal_error = error
            self.exit(1, return_code=1)
            return
        self._close_startup_screens()
        self.refresh_bindings()
        self.query_one(EngineHeader).show(None, "no model running")
        text, hint = describe_error(error)
        self.chat.notice(f"Could not start the model: {text}", hint or "Ctrl+R tries again.")
        self.chat.idle_status("No model")

    def on_engine_lost(self, message: EngineLost) -> None:
        self._engine_gone()

    def _engine_gone(self) -> None:
        engine, self.engine = self.engine, None
        self.chat.engine = None
        self.chat.files.restart()  # read again by the next engine
        self.chat.set_memory(None)  # no worker, no memory held: the bar says "mem –", not "?"
        self.query_one(EngineHeader).show(self.info, "engine stopped")
        if engine is not None:
            self._close_quietly(engine)

    @work(thread=True, group="close")
    def _close_quietly(self, engine: Engine) -> None:
        enginewatch.end(engine)  # a stuck one is killed: it cannot be asked to close

    def _sample_memory(self) -> None:
        if self._memory_probe is not None:  # the engine's memory: none while none runs
            self.chat.set_memory(self._memory_probe() if self.engine is not None else None)
        self._check_engine()

    def _check_engine(self) -> None:
        """A worker that died while the chat is idle (killed, out of memory) is said at once,
        not at the next send. (Mid-answer, the answer's own error says it.)"""
        engine = self.engine
        if engine is None or self.stream is not None or self._starting:
            return
        if engine_alive(engine) is False:
            self._engine_gone()
            self.chat.notice("The engine stopped while the chat was idle: its worker process ended "
                             "(killed, or out of memory).", RESTART_HINT)
            self.chat.idle_status("No model")

    # -- actions ---------------------------------------------------------------------------
    def action_answer_now(self) -> None:  # Ctrl+T: the thought ends; the answer follows
        answer_now(self.chat)

    def on_key(self, event: events.Key) -> None:
        if event.key == "ctrl+t" and not self.check_action("answer_now", ()):
            answer_now(self.chat)  # hidden: it says why there is no thought to end

    def action_stop(self) -> None:
        """Esc: closes the keys panel when it is open, else stops the answer."""
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
            return
        self.chat.stop()

    async def action_interrupt(self) -> None:
        """Ctrl+C: copies a selection; else stops the answer, and the next Ctrl+C quits (on an
        idle chat, a second Ctrl+C within a few seconds quits)."""
        focused = self.focused
        if getattr(focused, "selected_text", "") and hasattr(focused, "action_copy"):
            focused.action_copy()
            return
        if self.screen.get_selected_text():
            self.screen.action_copy_text()
            return
        if self._ctrl_c_stopped is not None and self._ctrl_c_stopped is self.chat.last_stream:
            await self.action_quit()  # the answer a Ctrl+C stopped is still the last one
            return
        if self.stream is not None:
            self._ctrl_c_stopped = self.stream
            self.chat.stop()
            self.notify("Stopping the answer (it is kept). Ctrl+C again or Ctrl+Q quits.")
            return
        now = time.monotonic()
        if now - self._ctrl_c_at <= CTRL_C_AGAIN:
            await self.action_quit()
            return
        self._ctrl_c_at = now
        self.notify("Ctrl+C again (or Ctrl+Q) quits.")

    def action_attach(self) -> None:  # Ctrl+O: a dialog asks for the file's path
        self.chat.files.ask()

    async def action_new_chat(self) -> None:
        await self.chat.new_chat()

    def action_about(self) -> None:
        text = self.about() if callable(self.about) else self.about
        self.push_screen(InfoScreen(about_markdown(self.info, text)))

    def get_system_commands(self, screen: Screen):
        """Textual's commands, with a screenshot that lands in a folder that exists."""
        for command in super().get_system_commands(screen):
            if command.title == "Screenshot":
                folder = settings().screenshots_dir
                yield SystemCommand("Screenshot", f"Save an SVG picture of the screen in {folder}",
                                    lambda: self.set_timer(0.1, self.save_screen_picture))
            else:
                yield command

    def save_screen_picture(self) -> None:
        """Save an SVG screenshot under the data folder and say where (or why not)."""
        folder = settings().screenshots_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = self.save_screenshot(path=str(folder))
        except OSError as exc:
            self.notify(f"Could not save the screenshot in {folder}: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"Screenshot saved: {path}")

    async def action_restart(self) -> None:
        if self._starting:
            self.notify("The engine is already starting.")
            return
        stream = self.stream
        if stream is not None:  # stop the answer (kept, marked interrupted), then restart
            self.notify("Stopping the answer (it is kept), then restarting the engine.")
            self.chat.shutdown()  # a stuck engine lets the answer go at once
            await asyncio.to_thread(stream.wait, 10.0)
            for _ in range(100):  # the chat shows the stopped answer before the engine goes
                if self.stream is None:
                    break
                await asyncio.sleep(0.05)
            if self._starting:
                return
        if self.engine is not None:
            self._engine_gone()
        self._open_engine("Restarting the engine")

    def _catch_signals(self) -> None:
        """SIGTERM or SIGHUP (the terminal closed): stop the answer, save, restore the terminal, exit."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is None:
                continue
            try:
                loop.add_signal_handler(sig, self._on_signal, int(sig))
            except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
                pass

    def _on_signal(self, signum: int) -> None:
        self.chat.shutdown()  # the answer's thread saves it, marked interrupted; on_unmount waits
        self.exit(128 + signum, return_code=128 + signum)
        threading.Thread(target=_exit_if_stuck, args=(self._ended, 128 + signum), daemon=True,
                         name="pocketchat-exit-guard").start()

    def run(self, *args, **kwargs):  # type: ignore[override]
        try:
            return super().run(*args, **kwargs)
        finally:
            self._ended.set()  # the exit guard stands down

    async def action_quit(self) -> None:
        self.chat.shutdown()
        self.exit(0)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide keys that do nothing now (chat keys while loading). Esc stays shown: showing
        and hiding it rebuilt the footer while the model decodes, CPU taken from the model."""
        if action in ("new_chat", "restart", "answer_now"):  # Ctrl+T: while thinking is on
            return self._startup_screen() is None and not self._starting and (action != "answer_now"
                or self.chat.thinking and getattr(self.info, "thinking", None) is not False)
        return True

    async def on_unmount(self) -> None:
        self.chat.shutdown(wait=5.0)
        engine, self.engine = self.engine, None
        if engine is not None:
            enginewatch.end(engine)


def _exit_if_stuck(ended: threading.Event, code: int, grace: float = EXIT_GRACE) -> None:
    """End the process if the app has not ended `grace` seconds after a signal: the chat and
    the model's state are saved by then, and Textual can hang writing to a terminal that closed."""
    if not ended.wait(grace):
        os._exit(code)


def create_app(engine_factory: EngineFactory, **kwargs) -> ChatApp:
    """Build the chat app (the CLI passes the real engine's factory, tests a scripted one)."""
    return ChatApp(engine_factory, **kwargs)
