"""Received bytes -> the partial file: written and hashed off the network thread."""

from __future__ import annotations

import errno
import os
import queue
import threading
from pathlib import Path

from pocketchat.errors import DiskFull
from pocketchat.store import cache

GB = 1000**3


class Sink:
    """Received bytes -> the partial file, written and hashed on a second thread.

    The network loop only receives; a worker thread writes in 1 MiB blocks and hashes them
    (both release the GIL, so this overlaps on another core), and a third one syncs the file to
    disk every 64 MiB without holding up the writes, so the final fsync has little left to do.
    `drain()` waits until the file holds every byte received; an error of the worker (a full
    disk) is raised in the caller's thread.
    """

    FLUSH_BYTES = 1024 * 1024
    SYNC_BYTES = 64 * 1024 * 1024
    _RESET = object()

    def __init__(self, f, digest: cache.Digest, partial: Path, size: int | None) -> None:
        self.f, self.digest, self.partial, self.size = f, digest, partial, size
        self.written = f.tell()
        self.error: BaseException | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._queue: queue.Queue = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._work, name="pocketchat-write", daemon=True)
        self._thread.start()
        self._sync_wanted = threading.Event()
        self._stopping = False
        self._syncer = threading.Thread(target=self._sync, name="pocketchat-sync", daemon=True)
        self._syncer.start()
        self._closed = False

    def add(self, chunk: bytes) -> None:
        if self.error is not None:
            raise self.error
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._chunks:
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            self._queue.put(data)

    def drain(self) -> None:
        """Return once every byte received is in the file (raises the worker's error)."""
        self.flush()
        self._queue.join()
        if self.error is not None:
            raise self.error

    def restart(self) -> None:
        """Throw away everything: the file is empty again and so is the hash."""
        self._chunks.clear()
        self._buffered = 0
        self._queue.put(self._RESET)
        self.drain()

    def close(self, *, flush: bool = True) -> None:
        """Write what is buffered, stop the worker (idempotent); raises the worker's error."""
        if self._closed:
            return
        self._closed = True
        if flush:
            self.flush()
        self._queue.put(None)
        self._thread.join()
        self._stopping = True
        self._sync_wanted.set()
        self._syncer.join()
        if flush and self.error is not None:
            raise self.error

    def _sync(self) -> None:
        """Write back to disk while the download goes on, without ever holding up a write."""
        sync = getattr(os, "fdatasync", os.fsync)
        while True:
            self._sync_wanted.wait()
            self._sync_wanted.clear()
            if self._stopping:
                return
            try:
                sync(self.f.fileno())
            except (OSError, ValueError):
                pass

    def _work(self) -> None:
        since_sync = 0
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if item is self._RESET:
                    self.f.seek(0)
                    self.f.truncate()
                    self.written = 0
                    self.digest.reset()
                    self.error = None
                    continue
                if self.error is not None:
                    continue
                try:
                    _write(self.f, item, self.partial, self.size, self.written)
                except BaseException as exc:  # handed to the caller's thread
                    self.error = exc
                    continue
                self.written += len(item)
                self.digest.update(item)
                since_sync += len(item)
                if since_sync >= self.SYNC_BYTES:
                    since_sync = 0
                    self._sync_wanted.set()
            finally:
                self._queue.task_done()


def _write(f, chunk: bytes, partial: Path, size: int | None, done: int) -> None:
    view = memoryview(chunk)
    try:
        while view:
            n = f.write(view)
            view = view[n:]
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            free = cache.free_disk_bytes(partial.parent)
            left = (size - done) / GB if size is not None else 0
            raise DiskFull(
                f"the disk filled up while downloading to {partial.parent} "
                f"({done / GB:.2f} GB written, {left:.2f} GB to go, {free / GB:.2f} GB free); "
                "the partial file is kept",
                hint="Free some space and run the same command again: it resumes where it stopped.",
            ) from None
        raise

