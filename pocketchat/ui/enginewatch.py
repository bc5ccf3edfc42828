"""The chat's watch over its engine: whether the model's process responds, what the chat says
about it and how a stuck one ends; and what a new answer waits for before it uses the engine.

The app calls `watch(app)` every POLL seconds. A process that stops responding (SIGSTOP, stuck,
a swap storm: `types.liveness_of`) is said within 2 s (`say_stuck`: a notice in the
conversation, a toast, the status bar, the header); Esc then ends the answer at once (the
engine lets it go, the text is kept), a send is refused with its draft kept (`refused`), and
Ctrl+R or quitting ends the process with `end` (a kill: it cannot be asked to close). A process
that resumes is said too, and the chat goes on.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

from pocketchat.engines.types import Engine, Liveness, liveness_of
from pocketchat.ui.widgets import EngineHeader, StatusBar

POLL = 1.0  # how often the chat asks whether the model's process responds (with BEAT_SECONDS:
# a stopped process is on screen within 1.5 s, a silent idle one within 3 s)
STATE = "Not responding · Ctrl+R restarts"  # the status bar's state meanwhile
HINT = ("Ctrl+R restarts it (this conversation is kept). If the process resumes, the chat goes "
        "on by itself.")
ENGINE_WAIT = 120.0  # the longest a new answer waits for a state save or load to end
SHOW_WAIT = 1.0  # the longest a new answer waits for the screen to show the message


def watch(app: Any) -> None:
    """Say when the engine's process stops responding, and when it responds again."""
    engine, chat = app.engine, app.chat
    if engine is None or chat.starting:
        return
    found = liveness_of(engine)
    if found.responding != chat.stuck:
        return  # nothing changed
    header = app.query_one(EngineHeader)
    if found.responding:
        chat.stuck = False
        chat.notice("The model process responds again.", kind="info")
        if chat.stream is None:
            chat.idle_status()
        header.show(app.info)
    else:
        say_stuck(chat, found)
        header.show(app.info, "not responding")


def say_stuck(chat: Any, found: Liveness) -> None:
    """The chat's words for a process that stopped responding, and what to do."""
    chat.stuck = True
    text = found.message or "the model process is not responding"
    text = text[:1].upper() + text[1:] + "."
    hint = HINT if chat.stream is None else "Esc ends the answer here (its text is kept). " + HINT
    chat.notice(text, hint, "warning")  # in the conversation, after the answer in flight
    chat.notify(f"{text} {hint}", title="Not responding", severity="error", timeout=10,
                markup=False)  # in view at once, wherever the conversation is scrolled
    chat.status(dataclasses.replace(chat.query_one(StatusBar).figures, state=STATE))


def refused(chat: Any) -> bool:
    """True (and said) when a message cannot be sent: the process does not respond."""
    if not chat.stuck and liveness_of(chat.engine).responding:
        return False
    chat.notify("The model process is not responding: Ctrl+R restarts it (this conversation "
                "is kept).", severity="warning")
    return True


def shown_state(stuck: bool, state: str) -> str:
    """The status bar's state while an answer streams: STATE while the process is stuck."""
    return STATE if stuck else state


def end(engine: Engine) -> None:
    """End an engine: `kill()` when its process does not respond (it cannot be asked to close),
    else `close()`; never raises (a dead engine may fail to close)."""
    kill = getattr(engine, "kill", None)
    try:
        if callable(kill) and not liveness_of(engine).responding:
            kill()
        else:
            engine.close()
    except Exception:  # noqa: BLE001 - nothing more to do with it
        pass


def answer_waiter(shown: threading.Event, last: Any, restored: threading.Event,
                  reading: Any = None) -> Callable[[], None]:
    """What a new answer's thread waits for first: the screen showing the message (laying out
    the chat takes a core that the model's first tokens would otherwise lose), the previous
    answer's end and state save (`last`, an AnswerStream or None), a state load, and the
    files' read-ahead (`reading`, a ReadAhead or None): one engine call at a time."""

    def wait() -> None:
        shown.wait(SHOW_WAIT)
        if last is not None:
            last.wait_settled(ENGINE_WAIT)
        restored.wait(ENGINE_WAIT)
        if reading is not None:
            reading.wait(ENGINE_WAIT)

    return wait
