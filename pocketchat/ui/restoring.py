"""A saved conversation's model state loaded into the engine when the chat opens it, in a
thread, after the last answer has settled and any read-ahead has stopped; the chat's status
says so meanwhile, and a note says whether it loaded (conversations/modelstate does the work).
An answer asked meanwhile waits for it (`Chat._restored`)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from pocketchat.conversations import Conversation, modelstate
from pocketchat.engines.types import Engine
from pocketchat.ui.enginewatch import ENGINE_WAIT
from pocketchat.ui.format import restoring_line
from pocketchat.ui.widgets import StatusBar


def start(chat: Any) -> None:
    """Begin loading the open conversation's state (nothing to do without an engine or a
    message)."""
    if chat.engine is not None and chat.conversation.messages:
        chat._restored = threading.Event()
        chat._restore_task = asyncio.create_task(  # a reference keeps the task alive
            _restore(chat, chat.engine, chat.conversation, chat._restored))


async def _restore(chat: Any, engine: Engine, conversation: Conversation,
                   done: threading.Event) -> None:
    try:
        last = chat.last_stream
        if last is not None:
            await asyncio.to_thread(last.wait_settled, ENGINE_WAIT)
        await asyncio.to_thread(chat.files.wait_idle, ENGINE_WAIT)  # a read-ahead stopped
        if chat.stream is None and conversation.state_path.exists():
            chat.idle_status(restoring_line(conversation.state_path.stat().st_size))
        result = await asyncio.to_thread(modelstate.restore, engine, conversation)
    finally:
        done.set()
        if chat.stream is None and chat.query(StatusBar):
            chat.idle_status()
    if result is not None and conversation is chat.conversation and engine is chat.engine:
        chat.notice(result.text, kind="info")
        if result.loaded and chat.stream is None:  # the meter: what the context now holds
            chat.idle_status(context_used=result.tokens)
