"""One answer asked of an `EngineHost` as the endpoints ask it: wait for a turn (the bounded
queue), then stream the answer (`Turn.answer`)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator, Sequence

from pocketchat.engines.types import ChatOptions, Message
from pocketchat.server.host import EngineHost
from pocketchat.server.turn import Streamed, chat_run


@asynccontextmanager
async def generate(host: EngineHost, messages: Sequence[Message], options: ChatOptions
                   ) -> AsyncIterator[Streamed]:
    async with host.turn() as turn, turn.answer(chat_run(tuple(messages), options)) as answer:
        yield answer
