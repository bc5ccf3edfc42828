"""Getting a model running without freezing the screen: prepare (download), then open.

Both steps run in a daemon thread, not a Textual worker: loading 13 GB can take minutes, and
a Textual thread worker would hold the app's exit (the event loop waits for its executor)
until the load ends. A daemon thread lets Ctrl+Q quit at once.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import sys
import time
from typing import Callable

from textual.app import App

from pocketchat.errors import (
    AmbiguousModel,
    DownloadDeclined,
    GatedRepo,
    HardwareProfileError,
    ModelNotFound,
    ModelTooLarge,
    NotWritable,
    NothingFits,
    OfflineError,
    UnsupportedModel,
    UsageError,
)
from pocketchat.engines.types import Engine
from pocketchat.ui.priority import launcher
from pocketchat.ui.messages import (
    EngineFailed,
    EngineReady,
    LoadProgress,
    StartupNote,
    StartupProgress,
    StartupStatus,
)
from pocketchat.ui.screens import ConfirmScreen

EngineFactory = Callable[..., Engine]  # () or (on_progress=...) -> the loaded engine

# Errors about what the user asked for: the chat cannot go on, the CLI prints them and exits 1.
FATAL_AT_START: tuple[type[BaseException], ...] = (
    UsageError,
    HardwareProfileError,
    ModelNotFound,
    AmbiguousModel,
    NothingFits,
    ModelTooLarge,  # restarting will not make it fit
    UnsupportedModel,  # this llama.cpp cannot load its architecture
    GatedRepo,
    OfflineError,  # offline and the starter model declined
    DownloadDeclined,  # the user said no to the download
    NotWritable,  # a read-only model cache: fixed outside the chat
)


class StartupHooks:
    """What a `prepare` step may use from its thread: ask, report progress, say what it does."""

    PROGRESS_INTERVAL = 0.1

    def __init__(self, app: App) -> None:
        self.app = app
        self._last_progress = 0.0

    def confirm(self, question: str) -> bool:
        """Ask a yes/no question on screen and wait for the answer."""
        answer: concurrent.futures.Future[bool] = concurrent.futures.Future()

        def ask() -> None:
            self.app.push_screen(ConfirmScreen(question), callback=answer.set_result)

        self.app.call_from_thread(ask)
        return bool(answer.result())

    def progress(self, done: int, total: int | None = None, what: str = "") -> None:
        """Bytes downloaded so far (at most 10 screen updates a second; the last always shows)."""
        now = time.monotonic()
        final = total is not None and done >= total
        if not final and now - self._last_progress < self.PROGRESS_INTERVAL:
            return
        self._last_progress = now
        self.app.post_message(StartupProgress(int(done), total, what, now))

    def status(self, text: str) -> None:
        self.app.post_message(StartupStatus(text))

    def note(self, text: str) -> None:
        """Show a note in the chat once it opens."""
        self.app.post_message(StartupNote(text))


def prestart_process_helpers() -> None:
    """Start multiprocessing's resource tracker while stderr is still the terminal's.

    Inside a running Textual app, sys.stderr is Textual's capture object whose fileno() is
    not a real descriptor; a worker process spawned then fails ("bad value(s) in
    fds_to_keep") because the tracker is started with sys.stderr.fileno(). Started once
    beforehand, the tracker is reused by every later spawn.
    """
    launcher()  # started now, before any thread of the UI is lowered
    if sys.platform == "win32":
        return
    try:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    except Exception:  # noqa: BLE001 - best effort; the engine reports its own failure
        pass


def open_with_progress(app: App, factory: EngineFactory) -> Engine:
    """`factory()`, with the load's progress posted to `app` when the factory takes
    `on_progress(stage, fraction)`."""
    try:
        takes = "on_progress" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        return factory()

    def on_progress(stage: str, fraction: float) -> None:
        app.post_message(LoadProgress(stage, fraction))

    return factory(on_progress=on_progress)


def start_engine(
    app: App,
    factory: EngineFactory,
    prepare: Callable[[StartupHooks], object] | None,
) -> None:
    """Run `prepare` (when given) then `factory` in the launcher thread; post the outcome
    (and the load's progress, see `open_with_progress`).

    The launcher's daemon thread keeps the normal CPU priority, so the worker it spawns does
    too when the UI's threads are lowered (see priority.py).
    """

    def run() -> None:
        try:
            if prepare is not None:
                prepare(StartupHooks(app))
            app.post_message(StartupStatus("Loading the model"))
            engine = open_with_progress(app, factory)
        except BaseException as exc:  # noqa: BLE001 - every failure is shown in the app
            app.post_message(EngineFailed(exc))
            return
        if not app.post_message(EngineReady(engine)):
            try:  # the app is gone: do not leave a loaded model behind
                engine.close()
            except Exception:  # noqa: BLE001
                pass

    launcher().submit(run)
