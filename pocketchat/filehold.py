"""A process's hold on a file while it works on it: an OS lock that ends with the process.

`hold_file(lock, owner)` takes the lock at `lock` (creating it) and writes this process's id
in it, or says which live process holds it (`holder`: never one that is gone). Where the file
system has no locks the hold is granted. `conversations.hold` holds a saved chat with it.
A full disk is the one write error it raises (an `OSError` naming the lock's folder): nothing
could be saved there either, and the caller says so.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class Hold:
    """This process's hold on a conversation's file while a chat shows it; `release()` or the
    process's end lets it go (an OS lock: a killed process leaves nothing stale behind)."""

    def __init__(self, handle: Any, conversation_id: str) -> None:
        self._handle = handle
        self.conversation_id = conversation_id  # what it holds (a conversation's id)

    def release(self, *, forget: bool = False) -> None:
        """Let the conversation go; `forget` also deletes the lock file (a chat never saved:
        no other process can know its id)."""
        if self._handle is None:
            return
        path, handle, self._handle = Path(self._handle.name), self._handle, None
        if forget:
            path.unlink(missing_ok=True)
        handle.close()  # closing the file drops the lock


def holder(lock: Path, recorded: int) -> int:
    """The process that holds `lock` now, or 0 when it cannot be known: never a process that is
    gone. The pid written in the file is its first holder's; a process it started without
    closing the file (a fork) keeps the lock after it ends, so where the system shows which
    processes have the file open (Linux's /proc), that decides."""
    openers = _openers(lock)
    if openers is not None:
        return recorded if recorded in openers else min(openers, default=0)
    return recorded if recorded and _alive(recorded) else 0


def _openers(path: Path) -> set[int] | None:
    """The ids of the processes (of this user) that have `path` open; None where unknown."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    target = os.path.realpath(path)
    found = set()
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:  # gone, or another user's
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) == target:
                        found.add(int(entry.name))
                        break
                except OSError:
                    continue
    return found


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill would end it there; its locks end with it: the pid stands
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: it exists
        return True
    return True


def _try_lock(handle: Any) -> bool:
    """An exclusive, non-blocking lock on the open file; False when another process has it."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:  # no locks on this file system (ENOLCK): save() still guards
        log.warning("file locks are not available here: %s", exc)
        return True


def hold_file(lock: Path, owner: str) -> Hold | int:
    """Hold `lock` for this process (`owner` names what it guards, for the log): the `Hold`,
    or the id of the live process that already holds it (0 when not known; `holder`)."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a+b")
    except OSError as exc:  # a read-only folder: saving will say so; nothing to guard here
        _raise_if_full(exc, lock)
        log.warning("cannot lock %s: %s", lock, exc)
        return Hold(None, owner)
    if not _try_lock(handle):
        handle.seek(0)
        text = handle.read(32).decode("ascii", "replace").strip()
        handle.close()
        return holder(lock, int(text) if text.isdigit() else 0)
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()).encode())
        handle.flush()
    except OSError as exc:
        with contextlib.suppress(OSError):  # closing flushes what did not fit once more
            handle.close()
        _raise_if_full(exc, lock)
        log.warning("cannot write the lock %s: %s", lock, exc)
        return Hold(None, owner)
    return Hold(handle, owner)


def _raise_if_full(exc: OSError, lock: Path) -> None:
    if exc.errno in NO_SPACE:
        raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(lock.parent)) from exc
