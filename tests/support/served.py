"""`child._serve` (the worker's serving loop) in a thread over a real pipe, its requests sent
the way `WorkerEngine` sends them."""

from __future__ import annotations

import multiprocessing
import threading

from pocketchat.engines.worker import child
from pocketchat.engines.types import ChatOptions, Chunk, Message

HI = (Message("user", "Say hello."),)


class Served:
    """`child._serve` on an engine in a thread; requests sent the way WorkerEngine sends them."""

    def __init__(self, engine) -> None:
        self.conn, theirs = multiprocessing.Pipe(duplex=True)
        lock = threading.Lock()

        def send(msg: tuple) -> None:
            with lock:
                theirs.send(msg)

        self.thread = threading.Thread(target=child._serve, args=(engine, theirs, send, 0.0),
                                       daemon=True)
        self.thread.start()
        self.req = 0

    def chat(self, kind: str = "chat", payload=HI, options: ChatOptions | None = None
             ) -> list[Chunk]:
        return self.collect(self.send(kind, payload, options))

    def send(self, kind: str = "chat", payload=HI, options: ChatOptions | None = None) -> int:
        """Send a request; its number."""
        self.req += 1
        self.conn.send((kind, self.req, payload, options or ChatOptions()))
        return self.req

    def collect(self, req: int) -> list[Chunk]:
        """The chunks of request `req`, to its last (the only request in flight)."""
        chunks = []
        while not chunks or chunks[-1].finish_reason is None:
            assert self.conn.poll(10), "the worker stopped answering"
            msg = self.conn.recv()
            assert msg[0] == "chunk" and msg[1] == req, msg
            chunks.append(msg[2])
        return chunks

    def call(self, name: str, *args):
        self.req += 1
        self.conn.send((name, self.req, *args))
        assert self.conn.poll(10), "the worker stopped answering"
        msg = self.conn.recv()
        assert msg[:2] == ("result", self.req), msg
        return msg[2]

    def close(self) -> None:
        self.conn.send(("close",))
        self.thread.join(10)
        assert not self.thread.is_alive()
